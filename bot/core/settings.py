"""The one settings object of a run and its one set of defaults.

`Settings` is built once per command by `bot.config.load_settings` (defaults < the repository's
config file < action inputs < the command line) and passed down; every option object of the
engine is derived from it (`bot.cli.engine_options`), and a default of an option object is either absent
or read from `DEFAULTS`, so a setting has one default and one name from its flag to its use.
The choices are enums whose values are the strings users write, so a value compares equal to
its string and serialises as it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Strategy(StrEnum):
    SEARCH = "search"  # needs no LLM
    LLM = "llm"  # an OpenAI-compatible endpoint
    ALL = "all"


class Backend(StrEnum):
    """What the LLM writes."""

    TRITON = "triton"
    CUDA = "cuda"


class SandboxKind(StrEnum):
    PROCESS = "process"
    DOCKER = "docker"


class TimingMode(StrEnum):
    """How GPU work is timed (docs/benchmark.md); a CPU is timed by its host clock in every mode."""

    LATENCY = "latency"
    THROUGHPUT = "throughput"
    GRAPH = "graph"


# A candidate of the reference's own precision (another TF32 algorithm, another order of a
# long float32 reduction) has errors of the same distribution. Over thousands of independent
# elements its largest is within tens of percent of the reference's; but where one rounding
# moves a whole row (a row's mean, on rows far off zero) there are as many draws as rows, and a
# two-pass float32 LayerNorm's largest error over 64 such rows exceeded twice torch's in 2.6 %
# of 2,000 draws, three times in 0.25 %, four times in none. One precision class worse is 8x
# (bf16's unit roundoff 2^-8 against TF32's 2^-11) and still fails.
OWN_ERROR_MULTIPLE = 4.0  # the strict policy's: the engine's bound and the reports' words


class TolerancePolicy(StrEnum):
    """What outputs are compared with, and how closely (docs/verifier.md, "Tolerance")."""

    STRICT = "strict"  # the float64 oracle; the bound widened by the problem's own error against it
    KERNELBENCH = "kernelbench"  # torch.allclose against the problem's own Model, as KernelBench judges


class DeviceChoice(StrEnum):
    AUTO = "auto"  # cuda where torch sees a GPU
    CPU = "cpu"
    CUDA = "cuda"


class Device(StrEnum):
    """The device a run's candidates run on: the `DeviceChoice` resolved (bot.cli.engine_options). It
    travels to workers and into results.json as its word, which compares equal to it."""

    CPU = "cpu"
    CUDA = "cuda"


def choices(kind: type[StrEnum]) -> list[str]:
    """The strings a user may write for `kind`, in declaration order."""
    return [member.value for member in kind]


@dataclass(frozen=True)
class Settings:
    """Everything configurable about a run. The repository's file and the action inputs may set
    the fields `bot.config.CHECKS` names; the rest only the person at the command line may."""

    problems_dir: str = "problems"
    label: str = "optimize-kernel"
    strategy: Strategy = Strategy.SEARCH
    budget_s: float = 900.0  # wall clock per problem (NVIDIA's loop used about 15 minutes)
    max_rounds: int = 5
    samples: int = 2  # LLM samples per round
    min_speedup: float = 1.05  # claimed only where the 95 % interval's lower bound clears it
    # A speedup above it is flagged for a human and never claimed (bot.core.plausible).
    max_plausible_speedup: float = 100.0
    model: str | None = None
    backend: Backend = Backend.TRITON
    sandbox: SandboxKind = SandboxKind.PROCESS
    max_open_prs: int = 5
    kernel_paths: tuple[str, ...] = ("kernels/**", "problems/**")  # what the bot may change
    # Where the follow-up branch gets the speedup chart ("" for none). The publishing stage
    # draws it from the validated numbers itself, so it is no file of the untrusted results.
    chart_path: str = "docs/kernel-bot/speedups.png"
    time_cap_s: float = 5.0  # timing budget per shape, all contenders together
    timing: TimingMode = TimingMode.LATENCY
    device: DeviceChoice = DeviceChoice.AUTO
    # The command line's alone: a pull request must not be able to turn off what keeps one
    # process's offset out of the verdicts, nor spend the runner's tokens or cache.
    replicas: int = 2  # worker processes per compared contender
    max_tokens: int | None = None  # LLM token budget per problem
    exclude: tuple[str, ...] = ()  # fnmatch patterns of search candidate names to leave out
    use_cache: bool = True  # reuse verdicts and timings of candidates judged before
    # The command line's alone too: a pull request must not loosen the rule its own code is judged by.
    tolerance: TolerancePolicy = TolerancePolicy.STRICT
    # Run candidates under a process sandbox that cannot contain them (bot.sandbox.contained).
    allow_uncontained: bool = False


DEFAULTS = Settings()
