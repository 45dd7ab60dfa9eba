"""The typed contenders of results.json back to the outcomes they were written from: the inverse of
`ContenderResult.of` and `ShapeResult.of`, for a reader that judges again (the result cache,
bot.engine.evaluation.cache). Only validated objects come in (bot.core.results.Results.from_json)."""

from __future__ import annotations

from bot.core.domain import CandidateSource, Verdict
from bot.core.measurement import Speedup
from bot.core.outcomes import ContenderOutcome, ShapeOutcome
from bot.core.results_contenders import ContenderResult
from bot.core.results_shapes import ShapeResult


def shape_outcome(result: ShapeResult) -> ShapeOutcome:
    """The outcome `ShapeResult.of` wrote this from."""
    measurement = result.measurement.samples if result.measurement else None
    speedup = None
    if result.speedup is not None and result.speedup_ci is not None:
        derivation = result.derivation
        speedup = Speedup(
            result.speedup,
            result.speedup_ci[0],
            result.speedup_ci[1],
            result.level if result.level is not None else 0.95,
            result.significance or "no significant difference",
            derivation.baseline if derivation else None,
            derivation.spread_log_sd if derivation else 0.0,
            derivation.spread_df if derivation else 0,
            derivation.resamples if derivation else 2000,
        )
    return ShapeOutcome(
        result.shape,
        result.inputs or "",
        result.output_dtype,
        measurement,
        speedup,
        result.floor_us,
        result.max_abs_err,
        result.norm_rel_err,
        result.nbytes,
        result.flops,
    )


def contender_outcome(result: ContenderResult, candidate: CandidateSource) -> ContenderOutcome:
    """The outcome `result` was written from, for `candidate` (whose source it names)."""
    return ContenderOutcome(
        candidate,
        result.role or "candidate",
        Verdict("accepted" if result.is_accepted else "rejected", result.checks),
        tuple(shape_outcome(s) for s in result.shapes),
        result.not_timed,
    )
