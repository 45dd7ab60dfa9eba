"""Time of stage 2's re-derivation for the costliest artifacts its caps admit (bot/github/rederive_cost.py,
bot.core.results_schema.MAX_VALUES, bot.github.untrusted.MAX_RESULTS_BYTES).

Each line but the last is one artifact shape: N timed candidates whose measurements have the given
samples and batches, as many as the caps admit (or the first shape over one). `stage_two_s` and
`stage_two_cpu_s` are stage 2's own work on it, from the file on disk to every number re-derived
(reading and validating, making the text inert, the vectorised bootstrap of bot.github.bootstrap);
`stage_one_function_cpu_s` is the CPU time of the same re-derivation with stage 1's pure-Python
`bot.core.stats.speedup`, which the unit model is fitted to. The artifacts are serialised by stage
1's own code (tests/stage_two_artifacts.py) with one honest candidate copied under other names, so
building them costs one speedup each.

The last line reads an artifact of one- and two-digit samples as close to the caps as it gets
(the most values a file under the byte cap can hold), up to its refusal.

    PYTHONPATH=tests .venv/bin/python benchmarks/rederive_cost.py
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from stage_two_artifacts import copied_candidates  # noqa: E402

from bot.core import stats as bench  # noqa: E402
from bot.core.errors import BotError  # noqa: E402
from bot.core.results import Results  # noqa: E402
from bot.core.results_schema import MAX_VALUES  # noqa: E402
from bot.core.safe_text import inert_results  # noqa: E402
from bot.github import bootstrap  # noqa: E402
from bot.github import rederive as rd  # noqa: E402
from bot.github.rederive_cost import MAX_UNITS  # noqa: E402
from bot.github.untrusted import MAX_RESULTS_BYTES, load_results  # noqa: E402

SHAPES = [(8, 5), (40, 25), (100, 10), (400, 25), (2000, 5), (20, 1000), (2000, 10)]  # (batches, samples per batch)


def units(doc: dict) -> int:
    return rd.cost_of(Results.from_json(doc)).units


def costliest(batches: int, per_batch: int) -> dict:
    """As many copies as the caps on bootstrap steps, values and bytes admit."""
    one, two = copied_candidates(1, batches, per_batch), copied_candidates(2, batches, per_batch)
    per = units(two) - units(one)
    copies = max(1, 1 + (MAX_UNITS - units(one)) // per) if per else 1
    copies = min(copies, (MAX_VALUES - 2_000) // (3 * batches * per_batch))
    size = len(json.dumps(one))
    copies = max(1, min(copies, 1 + (MAX_RESULTS_BYTES - size) // (len(json.dumps(two)) - size)))
    return copied_candidates(copies, batches, per_batch)


def stage_two(doc: dict) -> tuple[float, float, str]:
    """(wall s, CPU s, outcome) from the file to every number re-derived."""
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "results.json").write_text(json.dumps(doc))
        wall, cpu = time.monotonic(), time.process_time()
        try:
            rd.rederive(inert_results(load_results(Path(tmp), lambda _: True)), 1.05)
            outcome = "re-derived"
        except BotError as exc:
            outcome = str(exc)
        return time.monotonic() - wall, time.process_time() - cpu, outcome


def stage_one_function(doc: dict) -> float:
    began = time.process_time()
    with mock.patch.object(bootstrap, "speedup", bench.speedup):
        try:
            rd.rederive(Results.from_json(doc), 1.05)
        except BotError:
            pass
    return time.process_time() - began


def small_samples() -> dict:
    """Candidates of 20,000 samples `1` to `17` (a few bytes each) up to the byte cap."""
    doc = copied_candidates(1)
    problem = doc["problems"][0]
    template = problem["attempts"][0]
    samples = [1 + i % 17 for i in range(20_000)]
    big = {"samples_us": samples, "batch_sizes": [10] * 2_000, "batch_workers": [b % 2 for b in range(2_000)]}
    template["shapes"][0]["measurement"].update(big)
    template["shapes"][0]["derivation"]["baseline"] = big
    one = len(json.dumps(template)) + 2
    problem["attempts"] = [
        {**template, "name": f"c{k}"} for k in range((MAX_RESULTS_BYTES - len(json.dumps(doc))) // one - 1)
    ]
    return doc


def main() -> None:
    for batches, per_batch in SHAPES:
        doc = costliest(batches, per_batch)
        wall, cpu, outcome = stage_two(doc)
        line = {
            "candidates": len(doc["problems"][0]["attempts"]),
            "samples": batches * per_batch,
            "batches": batches,
            "mb": round(len(json.dumps(doc)) / 1e6, 2),
            "units_million": round(units(doc) / 1e6, 1),
            "stage_two_s": round(wall, 2),
            "stage_two_cpu_s": round(cpu, 2),
            "stage_one_function_cpu_s": round(stage_one_function(doc), 2) if outcome == "re-derived" else None,
            "outcome": outcome[:160],
        }
        print(json.dumps(line), flush=True)
    doc = small_samples()
    wall, cpu, outcome = stage_two(doc)
    print(
        json.dumps(
            {
                "small_samples_mb": round(len(json.dumps(doc)) / 1e6, 2),
                "stage_two_s": round(wall, 2),
                "stage_two_cpu_s": round(cpu, 2),
                "outcome": outcome[:160],
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
