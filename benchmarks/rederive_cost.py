"""CPU time of stage 2's re-derivation for artifacts at the cost cap (bot/github/rederive_cost.py).

Each line but the last is one artifact shape: N timed candidates whose measurements have the given samples
and batches, as many as the cap admits (or the first shape over it), re-derived in this one
process (no pool), so the CPU seconds are what the work costs whatever else the machine runs;
spread over the CI machine's two cores, the wall time is about half. The artifacts are
serialised by stage 1's own code (tests/stage_two_artifacts.py) with one honest candidate
copied under other names, so building them costs one speedup each.

The last line is the CPU time of parsing and validating a file of samples at the size cap.

    PYTHONPATH=tests .venv/bin/python benchmarks/rederive_cost.py
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from stage_two_artifacts import copied_candidates  # noqa: E402

from bot.core.results import Results  # noqa: E402
from bot.github import rederive as rd  # noqa: E402
from bot.github.rederive_cost import MAX_UNITS  # noqa: E402
from bot.github.untrusted import MAX_RESULTS_BYTES, parse_results  # noqa: E402

SHAPES = [(8, 5), (100, 10), (400, 25), (2000, 5), (2000, 10)]  # (batches, samples per batch)


def artifact(copies: int, batches: int, per_batch: int) -> Results:
    return Results.from_json(copied_candidates(copies, batches, per_batch))


def units(results: Results) -> int:
    return rd.cost_of(results).units


def validation() -> dict[str, float]:
    """CPU time to parse and validate a file of samples as close to the size cap as it gets."""
    doc = copied_candidates(20)
    big = {
        "samples_us": [100.0 + (i % 7) * 0.123456789 for i in range(20_000)],
        "batch_sizes": [10] * 2_000,
        "batch_workers": [b % 2 for b in range(2_000)],
    }
    problem = doc["problems"][0]
    for c in [*problem["attempts"], problem["best"]]:
        c["shapes"][0]["measurement"].update(big)
    raw = json.dumps(doc).encode()
    while len(raw) > MAX_RESULTS_BYTES:
        problem["attempts"].pop()
        raw = json.dumps(doc).encode()
    began = time.process_time()
    Results.from_json(parse_results(raw, "results.json"))
    return {"validated_mib": round(len(raw) / 2**20, 2), "cpu_s": round(time.process_time() - began, 2)}


def main() -> None:
    for batches, per_batch in SHAPES:
        one = units(artifact(1, batches, per_batch))  # the baseline's shape and one candidate
        per = units(artifact(2, batches, per_batch)) - one
        copies = max(1, 1 + (MAX_UNITS - one) // per) if per else 1
        results = artifact(copies, batches, per_batch)
        began = time.process_time()
        with mock.patch("os.cpu_count", return_value=1):  # one process: CPU time is the cost
            try:
                rd.rederive(results, 1.05)
                outcome = "re-derived"
            except Exception as exc:  # noqa: BLE001 - the refusal is the result here
                outcome = str(exc)
        print(
            json.dumps(
                {
                    "candidates": copies,
                    "samples": batches * per_batch,
                    "batches": batches,
                    "units_million": round(units(results) / 1e6, 1),
                    "cpu_s": round(time.process_time() - began, 2),
                    "outcome": outcome[:160],
                }
            ),
            flush=True,
        )

    print(json.dumps(validation()), flush=True)


if __name__ == "__main__":
    main()
