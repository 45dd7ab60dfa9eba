"""The command line's options, and the one way they become the run's `Settings`.

Every default shown here is read from `bot.core.settings.DEFAULTS`, so `--help` and a run
agree with the config file's documentation. Commands that work on a repository take only the
options the user actually gave as overrides of its configuration; the others start from the
defaults.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import click
from click.core import ParameterSource

from bot.config import OVERRIDE_CHECKS, load_settings
from bot.core.measurement import STEADY_REPLICAS
from bot.core.settings import (
    DEFAULTS,
    Backend,
    DeviceChoice,
    SandboxKind,
    Settings,
    Strategy,
    TimingMode,
    TolerancePolicy,
    choices,
)

F = TypeVar("F", bound=Callable[..., Any])

DEVICE = click.option(
    "--device",
    type=click.Choice(choices(DeviceChoice)),
    default=DEFAULTS.device.value,
    show_default=True,
    help="Where candidates run.",
)
_SANDBOX_KIND = click.option(
    "--sandbox",
    type=click.Choice(choices(SandboxKind)),
    default=DEFAULTS.sandbox.value,
    show_default=True,
    help="How untrusted candidates are isolated.",
)
# Not a setting of the repository's configuration: a pull request must not be able to let its
# own code out of the sandbox.
_ALLOW_UNCONTAINED = click.option(
    "--allow-uncontained",
    is_flag=True,
    default=DEFAULTS.allow_uncontained,
    help="Run candidates under the process sandbox even where it cannot contain them (not root, "
    "no namespaces, no cgroup or pids limit): they can then reach this host's files, sockets and "
    "processes. docs/sandbox.md.",
)


def SANDBOX(func: F) -> F:  # noqa: N802  used as the option decorators beside it are
    """--sandbox and --allow-uncontained."""
    return _SANDBOX_KIND(_ALLOW_UNCONTAINED(func))


JSON = click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
GPUS = click.option(
    "--gpus",
    default=None,
    help="GPU lanes: 'all' (default) or e.g. 0,1; timing is exclusive per GPU, problems are spread over them.",
)
SHAPES = click.option(
    "--shapes", default=None, metavar="NAME[,NAME]", help="Only these of each problem's shapes (e.g. decode)."
)
TIMING = click.option(
    "--timing",
    type=click.Choice(choices(TimingMode)),
    default=DEFAULTS.timing.value,
    show_default=True,
    help="GPU: synchronise before each timed call (latency), "
    "time back-to-back calls (throughput: experimental, unreliable on launch-bound shapes), "
    "or time replays of each call captured as a CUDA graph (graph: the GPU's time alone, "
    "as a serving engine's graph-captured decode step pays it). docs/benchmark.md.",
)
TIME_CAP = click.option(
    "--time-cap-s", type=float, default=DEFAULTS.time_cap_s, show_default=True, help="Timing budget per shape."
)
MIN_SPEEDUP = click.option(
    "--min-speedup",
    type=float,
    default=DEFAULTS.min_speedup,
    show_default=True,
    help="Claim only when the 95% interval's lower bound clears this.",
)
# Not a setting of the repository's configuration: a pull request must not be able to turn off
# what keeps one process's offset out of the verdicts.
REPLICAS = click.option(
    "--replicas",
    type=click.IntRange(1, STEADY_REPLICAS),
    default=DEFAULTS.replicas,
    show_default=True,
    help="Worker processes per compared contender; the spread between them "
    "widens every interval (1: faster, but one process's offset can pass for a "
    f"speedup; {STEADY_REPLICAS}: a launch-bound shape's median repeats within 1 %). "
    "docs/benchmark.md.",
)
CACHE = click.option(
    "--cache/--no-cache",
    "use_cache",
    default=DEFAULTS.use_cache,
    show_default=True,
    help="Reuse conclusive verdicts and timings of candidates judged before on this machine stack "
    "under the same protocol (docs/benchmark.md).",
)
# Not a setting of the repository's configuration either: a pull request must not loosen the rule
# its own code is judged by.
TOLERANCE = click.option(
    "--tolerance",
    type=click.Choice(choices(TolerancePolicy)),
    default=DEFAULTS.tolerance.value,
    show_default=True,
    help="strict: against the float64 oracle, the bound widened by the problem's own error against it; "
    "kernelbench: KernelBench's torch.allclose (atol = rtol = 1e-4 for float32, 1e-2 for half types) "
    "against the problem's own Model on the same device. docs/verifier.md.",
)


class JobsType(click.ParamType):
    """`--jobs`: 'auto' (None) or a positive number."""

    name = "auto|N"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int | None:
        if value is None or isinstance(value, int):
            return value
        if str(value).strip().lower() == "auto":
            return None
        try:
            number = int(value)
        except ValueError:
            number = 0
        if number < 1:
            self.fail(f"{value!r}: expected 'auto' or a number of problems, 1 or more", param, ctx)
        return number


def _shard(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """K/N checked before any work starts (bot.core.shards.parse_shard's error, exit 2)."""
    from bot.core.shards import parse_shard

    if value is not None:
        parse_shard(value)
    return value


SHARD = click.option(
    "--shard",
    default=None,
    metavar="K/N",
    callback=_shard,
    help="Only the K-th of N shards of the problems, as `bot plan --shards N` cuts them (balanced by cost).",
)
JOBS = click.option(
    "--jobs",
    type=JobsType(),
    default="auto",
    show_default=True,
    help="Problems optimised at once (compilation overlaps, each gets its share of the verification "
    "workers; timing stays exclusive). auto: one per core on a CPU, one per GPU on GPUs; more than "
    "the GPUs are admitted by their measured memory footprints (docs/scale-out.md).",
)


def tuning_options(func: F) -> F:
    """The options `bot optimize`, `bot dry-run` and `bot run` share."""
    options = [
        click.option(
            "--strategy",
            type=click.Choice(choices(Strategy)),
            default=DEFAULTS.strategy.value,
            show_default=True,
            help="search needs no LLM; llm uses an OpenAI-compatible endpoint.",
        ),
        click.option("--model", default=DEFAULTS.model, help="LLM model name (llm/all strategies)."),
        click.option(
            "--backend",
            type=click.Choice(choices(Backend)),
            default=DEFAULTS.backend.value,
            show_default=True,
            help="What the LLM writes.",
        ),
        click.option("--samples", type=int, default=DEFAULTS.samples, show_default=True, help="LLM samples per round."),
        click.option(
            "--budget-s",
            type=float,
            default=DEFAULTS.budget_s,
            show_default=True,
            help="Wall-clock budget per problem: no new round or group of candidates after it, and a "
            "candidate's first call (compiling, autotuning) stopped at it, at least 30 s in (not evaluated).",
        ),
        click.option("--max-rounds", type=int, default=DEFAULTS.max_rounds, show_default=True),
        click.option("--max-tokens", type=int, default=DEFAULTS.max_tokens, help="LLM token budget per problem."),
        MIN_SPEEDUP,
        click.option(
            "--max-plausible-speedup",
            type=click.FloatRange(1, min_open=True),
            default=DEFAULTS.max_plausible_speedup,
            show_default=True,
            help="A speedup above this is flagged for a human ('implausible; check the baseline') and never claimed.",
        ),
        TIME_CAP,
        TIMING,
        TOLERANCE,
        click.option(
            "--exclude",
            multiple=True,
            default=DEFAULTS.exclude,
            metavar="PATTERN",
            help="Leave out search candidates whose name matches (e.g. 'compile-max-autotune*').",
        ),
        DEVICE,
        SANDBOX,
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _setting_values(given: Mapping[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in given.items() if name in OVERRIDE_CHECKS}


def settings_of(given: Mapping[str, Any], **fixed: Any) -> Settings:
    """The settings of a command given problem files: defaults < its options < `fixed`."""
    return load_settings(None, overrides={**_setting_values(given), **fixed})


def given_overrides(ctx: click.Context, given: Mapping[str, Any]) -> dict[str, Any]:
    """The settings among the options the user actually gave: on a repository only these
    override its configuration (an option left at its default must not mask the file's value)."""
    return {
        name: value
        for name, value in _setting_values(given).items()
        if ctx.get_parameter_source(name) not in (ParameterSource.DEFAULT, None)
    }


def repository_settings(ctx: click.Context, repo: Path, given: Mapping[str, Any]) -> Settings:
    """The settings of a command run on the repository at `repo`."""
    return load_settings(repo, overrides=given_overrides(ctx, given))


def names(listed: str | None) -> tuple[str, ...]:
    """`a, b` -> ("a", "b"); None or empty -> ()."""
    return tuple(n.strip() for n in listed.split(",") if n.strip()) if listed else ()
