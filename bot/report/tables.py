"""Rendering of evaluations: human tables and JSON objects (no timing, no network)."""

from __future__ import annotations

from typing import Any

from bot.core.judge import significant
from bot.core.measurement import STEADY_REPLICAS
from bot.core.outcomes import ContenderOutcome, Evaluation
from bot.core.results_contenders import ContenderResult
from bot.core.results_shapes import ShapeResult
from bot.core.settings import Device


def _fmt(value: float | None, spec: str, missing: str = "-") -> str:
    return missing if value is None else format(value, spec)


def verdict_json(evaluation: Evaluation) -> dict[str, Any]:
    """`bot verify --json`: the one candidate's verdict with every check."""
    outcome = evaluation.candidates[0]
    return {
        "problem": evaluation.problem.name,
        "candidate": outcome.candidate.name,
        "device": evaluation.environment.device,
        **outcome.verdict.to_json(),
        "shapes": [ShapeResult.of(s).to_json() for s in outcome.shapes],
        "environment": evaluation.environment.to_json(),
    }


def bench_json(evaluation: Evaluation, min_speedup: float) -> dict[str, Any]:
    """`bot bench --json`: every contender with speedup, interval and raw samples."""
    return {
        "problem": evaluation.problem.name,
        "min_speedup": min_speedup,
        "environment": evaluation.environment.to_json(),
        "baseline": ContenderResult.of(evaluation.baseline).to_json() if evaluation.baseline else None,
        "candidates": [
            ContenderResult.of(c).to_json() | {"significant": significant(c, min_speedup)}
            for c in evaluation.candidates
        ],
    }


def _row(outcome: ContenderOutcome) -> list[str]:
    rows = []
    for shape in outcome.shapes:
        m, sp = shape.measurement, shape.speedup
        rows.append(
            [
                outcome.candidate.name,
                shape.shape,
                outcome.verdict.status,
                _fmt(m.median_us if m else None, ".1f"),
                _fmt(m.iqr_us if m else None, ".1f"),
                _fmt(sp.ratio if sp else None, ".3f"),
                f"[{sp.ci_low:.3f}, {sp.ci_high:.3f}]" if sp else "-",
                sp.significance if sp else "-",
                _fmt(shape.pct_of_floor, ".0f"),
                _fmt(shape.norm_rel_err, ".1e"),
            ]
        )
    return rows or [[outcome.candidate.name, "-", outcome.verdict.status] + ["-"] * 7]


def render_table(evaluation: Evaluation) -> str:
    """A plain-text table; rejected contenders list their reasons underneath."""
    header = [
        "contender",
        "shape",
        "verdict",
        "median us",
        "IQR us",
        "speedup",
        "95% CI",
        "significance",
        "% floor",
        "norm err",
    ]
    contenders = ([evaluation.baseline] if evaluation.baseline else []) + list(evaluation.candidates)
    rows = [header] + [r for c in contenders for r in _row(c)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
    env = evaluation.environment
    lines.insert(
        0,
        f"{evaluation.problem.name} on {env.device_name} (torch {env.torch}"
        f"{', triton ' + env.triton if env.triton else ''})",
    )
    for c in contenders:
        for reason in c.verdict.reasons:
            lines.append(f"  {c.candidate.name} rejected: {reason}")
        if c.verdict.accepted and c.not_timed:
            lines.append(f"  {c.candidate.name}: correct; not timed: {c.not_timed}")
    lines.extend(short_shape_notes(evaluation))
    return "\n".join(lines)


# Shapes this short move by about 2 % between runs at two processes per contender (38 us and
# longer held 0.3 % on the H200; bot.core.measurement.STEADY_REPLICAS). Verdicts stay right (the processes'
# spread widens the intervals), but a user comparing such a shape's medians across runs should know.
LAUNCH_BOUND_US = 10.0


def short_shape_notes(evaluation: Evaluation) -> list[str]:
    """A line per GPU shape of the baseline shorter than LAUNCH_BOUND_US that was timed in fewer
    than STEADY_REPLICAS processes."""
    if evaluation.environment.device != Device.CUDA or evaluation.baseline is None:
        return []
    return [
        f"note: {s.shape} takes {s.measurement.median_us:.1f} us; at {s.measurement.workers} worker "
        f"process(es) per contender such a median moves by about 2 % between runs, within 1 % with "
        f"--replicas {STEADY_REPLICAS} (docs/benchmark.md)"
        for s in evaluation.baseline.shapes
        if s.measurement is not None
        and s.measurement.median_us < LAUNCH_BOUND_US
        and s.measurement.workers < STEADY_REPLICAS
    ]
