"""Session 15 probe: would Inductor's own tuning options beat torch.compile's default on the
problems where default (static) compile is the search's pick? Each bundled problem at its GPU
shapes, compiled per shape (dynamic=False) with one option set at a time, timed as `--timing
graph` does (graph replay, fresh inputs copied in, the L2 flushed by reading 256 MB), medians
of replays in µs; eager alongside.

    PYTHONPATH=. python3 ci/evidence/probe_inductor_options.py [--problems a,b] [--replays N]
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from pathlib import Path

import torch

from graph_probe import DEV, flush_buffer, replay_median_us_sets as bench, spin_cycles_per_us

ROOT = Path(__file__).resolve().parents[2]
OPTIONS = {
    "default": {},
    "coordinate-descent": {"coordinate_descent_tuning": True},
    "cooperative-reductions": {"triton.cooperative_reductions": True},
    "multi-kernel": {"triton.multi_kernel": 1},
    "no-split-reductions": {"split_reductions": False},
    "no-persistent-reductions": {"triton.persistent_reductions": False},
}


def load(name: str):
    spec = importlib.util.spec_from_file_location(f"problem_{name}", ROOT / "problems" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def input_sets(module, shape: dict, count: int) -> list[list[torch.Tensor]]:
    for key, value in shape.items():
        setattr(module, key, value)
    return [[t.to(DEV) if isinstance(t, torch.Tensor) else t for t in module.get_inputs()] for _ in range(count)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--problems", default="cross_entropy,moe_topk_gating,transpose,layernorm,fp8_quant,rmsnorm,gelu")
    parser.add_argument("--replays", type=int, default=200)
    parser.add_argument("--out", default=os.path.join(os.environ.get("OUT", "/tmp"), "inductor-options.json"))
    args = parser.parse_args()
    flush = flush_buffer().view(torch.int32)
    cycles = spin_cycles_per_us()
    results: dict = {}
    print(f"{'problem':<18}{'shape':<12}{'variant':<26}{'µs':>10}{'vs default':>12}{'compile s':>10}", flush=True)
    for name in args.problems.split(","):
        module = load(name)
        torch.manual_seed(0)
        model = module.Model(*module.get_init_inputs()).to(DEV).eval()
        for shape_name, shape in module.SHAPES.items():
            sets = input_sets(module, shape, 2)
            row = results.setdefault(name, {}).setdefault(shape_name, {})
            with torch.no_grad():
                row["eager"] = bench(model, sets, args.replays, flush, cycles)
                print(f"{name:<18}{shape_name:<12}{'eager':<26}{row['eager']:>10.2f}", flush=True)
                for variant, options in OPTIONS.items():
                    torch._dynamo.reset()
                    try:
                        start = time.monotonic()
                        compiled = torch.compile(model, dynamic=False, options=dict(options))
                        compiled(*sets[0])
                        took = time.monotonic() - start
                        row[variant] = bench(compiled, sets, args.replays, flush, cycles)
                        ratio = row["default"] / row[variant] if "default" in row else float("nan")
                        print(f"{name:<18}{shape_name:<12}{variant:<26}{row[variant]:>10.2f}{ratio:>11.3f}x"
                              f"{took:>10.1f}", flush=True)
                    except Exception as exc:  # an option this torch lacks is a finding, not a crash
                        row[variant] = f"failed: {type(exc).__name__}: {str(exc)[:160]}"
                        print(f"{name:<18}{shape_name:<12}{variant:<26} {row[variant]}", flush=True)
            Path(args.out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    sys.exit(main())
