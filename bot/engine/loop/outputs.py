"""Optimisation results on disk and on the terminal: candidates, transcript, results.json.

The terminal and the document read the same core results (bot.core.results.ProblemResult);
the candidates' sources and the transcript come from beside them (bot.engine.loop.problem_run).

`write_results` is the one place results.json is written (tests/test_results_document.py
holds every other module to that).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from pathlib import Path

from bot.core.domain import Trigger
from bot.core.results import RESULTS_FILE, ProblemResult, Results
from bot.core.results_schema import RESULTS_SCHEMA_VERSION  # noqa: F401 (re-exported)
from bot.core.time_split import run_line
from bot.engine.loop.problem_run import ProblemRun


def results_document(results: Sequence[ProblemResult], trigger: Trigger | None, min_speedup: float) -> Results:
    """The typed results.json of a run (`trigger` None: `bot optimize`, no trigger to record)."""
    return Results(
        tuple(results),
        trigger,
        min_speedup,
        dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    )


def write_results(out: Path, results: Results) -> Path:
    """results.json in `out`: the only writer of the file."""
    path = out / RESULTS_FILE
    path.write_text(results.dumps())
    return path


def write_optimize_outputs(
    out: Path, runs: Sequence[ProblemRun], min_speedup: float, trigger: Trigger | None = None
) -> None:
    """Every candidate's source, the key-free LLM transcript, and results.json."""
    out.mkdir(parents=True, exist_ok=True)
    for run in runs:
        result = run.result
        folder = out / "candidates" / result.problem
        folder.mkdir(parents=True, exist_ok=True)
        for attempt in result.attempts:
            source = run.sources[attempt.source_sha256 or ""]
            (folder / f"r{attempt.round}-{attempt.name}-{attempt.source_hash}.py").write_text(source)
        if run.transcript:
            with open(out / f"transcript-{result.problem}.jsonl", "w") as fh:
                for entry in run.transcript:
                    fh.write(json.dumps(entry) + "\n")
    write_results(out, results_document([run.result for run in runs], trigger, min_speedup))


def render_optimize(results: Sequence[ProblemResult], min_speedup: float) -> str:
    """One block per problem: every attempt with its verdict, then the honest outcome."""
    lines = []
    for r in results:
        if r.error:
            lines.append(f"== {r.problem}: FAILED: {r.error}")
        else:
            device = r.environment.device_name if r.environment else "?"
            lines.append(f"== {r.problem} on {device} ({r.wall_s or 0:.0f} s, stopped: {r.stopped})")
        if r.time_split is not None:  # a failed problem's too: where its time went before it failed
            lines.append(f"  {r.time_split.line()}")
        if r.error:
            continue
        for a in sorted(r.attempts, key=lambda a: -(a.speedup or 0)):
            lines.append(f"  r{a.round} {a.name:48s} {a.status or '':8s} {(a.reason or '')[:140]}")
        for s in r.skipped:
            lines.append(f"  skipped {s.transformation}: {s.reason}")
        for flag in r.implausible[:1]:
            lines.append(
                f"  IMPLAUSIBLE {flag.name}: {flag.evidence} (not claimed: check the baseline;"
                f" {len(r.implausible)} candidate(s) flagged)"
            )
        if r.not_timed:
            lines.append(f"  correct; not timed: {r.not_timed} (the baseline)")
        elif r.best:
            lo, hi = r.best.speedup_ci
            lines.append(f"  BEST {r.best.name}: {r.best.speedup:.3f}x (95% CI [{lo:.3f}, {hi:.3f}], >= {min_speedup})")
        else:
            lines.append(f"  no significant improvement (no candidate's interval clears {min_speedup}x)")
    total = run_line(r.time_split for r in results)
    if total is not None and len(results) > 1:
        lines.append(f"== {total}")
    return "\n".join(lines)
