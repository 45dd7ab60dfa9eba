"""Verdicts and timings cached by (problem, baseline, candidate source, environment).

A candidate the bot has already judged on the same machine stack is not compiled, verified and
timed again (LLM rounds often repeat a candidate; nightly sweeps repeat the search). The key
holds everything the outcome depends on: the problem's source, the baseline's and the
candidate's source hashes, the device, GPU, driver, torch and triton versions, and the
threshold; a change to any of them is a miss.
"""

from __future__ import annotations

import json
import logging
import platform
import subprocess
from pathlib import Path
from typing import Any

from bot.core.domain import CandidateSource, CheckResult, Problem, Verdict, source_hash
from bot.core.measurement import Measurement, Speedup

log = logging.getLogger(__name__)


def environment_key(device: str, gpu_index: int | None) -> str:
    """Identity of the machine stack, read without starting CUDA in the bot's process."""
    import torch

    parts = [device, torch.__version__, torch.version.cuda or ""]
    try:
        from importlib.metadata import version

        parts.append(version("triton"))
    except Exception:
        parts.append("")
    if device == "cuda":
        try:
            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader", f"--id={gpu_index or 0}"],
                capture_output=True,
                text=True,
                timeout=20,
            )
            parts.append(out.stdout.strip())
        except (OSError, subprocess.SubprocessError):
            parts.append("unknown-gpu")
    else:
        parts.append(platform.processor() or platform.machine())
    return "|".join(parts)


def _outcome_from_json(data: dict[str, Any], candidate: CandidateSource):
    from bot.core.outcomes import ContenderOutcome, ShapeOutcome

    checks = tuple(
        CheckResult(c["name"], c["passed"], c.get("evidence", ""), c.get("details", {})) for c in data["checks"]
    )
    shapes = []
    for s in data["shapes"]:
        m = s.get("measurement")
        d = s.get("derivation") or {}  # what stage 2 re-derives the interval from: kept through the cache
        sp = (
            Speedup(
                s["speedup"],
                s["speedup_ci"][0],
                s["speedup_ci"][1],
                s.get("level", 0.95),
                s.get("significance", ""),
                Measurement.from_samples_json(d["baseline"]) if d.get("baseline") else None,
                d.get("spread_log_sd", 0.0),
                d.get("spread_df", 0),
                d.get("resamples", 2000),
            )
            if s.get("speedup") is not None
            else None
        )
        shapes.append(
            ShapeOutcome(
                s["shape"],
                s.get("inputs", ""),
                s.get("output_dtype"),
                Measurement(tuple(m["samples_us"]), tuple(m.get("batch_sizes", ())), tuple(m.get("batch_workers", ())))
                if m
                else None,
                sp,
                s.get("floor_us"),
                s.get("max_abs_err"),
                s.get("norm_rel_err"),
            )
        )
    return ContenderOutcome(candidate, data.get("role", "candidate"), Verdict(data["status"], checks), tuple(shapes))


class ResultCache:
    def __init__(self, root: Path, env_key: str, min_speedup: float):
        self.root = root
        self.env_key = env_key
        self.min_speedup = min_speedup

    def _path(self, problem: Problem, baseline: CandidateSource | None, candidate: CandidateSource) -> Path:
        key = source_hash(
            "\n".join(
                [
                    problem.source,
                    baseline.source_hash if baseline else "-",
                    candidate.source_hash,
                    candidate.class_name,
                    self.env_key,
                    str(self.min_speedup),
                ]
            )
        )
        return self.root / "results" / problem.name / f"{key}.json"

    def get(self, problem: Problem, baseline: CandidateSource | None, candidate: CandidateSource):
        path = self._path(problem, baseline, candidate)
        try:
            return _outcome_from_json(json.loads(path.read_text()), candidate)
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
            log.warning("ignoring unreadable cache entry %s: %s", path, exc)
            return None

    def put(self, problem: Problem, baseline: CandidateSource | None, outcome) -> None:
        # A worker that could not even start says nothing about the candidate: not cached.
        if any(c.name == "start" for c in outcome.verdict.checks if not c.passed):
            return
        path = self._path(problem, baseline, outcome.candidate)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(outcome.to_json()))
        tmp.replace(path)
