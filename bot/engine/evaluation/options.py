"""How one problem's contenders are verified and timed (`EvalOptions`), and where conclusive
results are kept by default."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from bot.core.settings import DEFAULTS, Device, SandboxKind, TolerancePolicy
from bot.engine.timing.records import TimingOptions
from bot.engine.workspace.memory_budget import MemoryBudget
from bot.sandbox import Limits


def default_cache_root() -> Path:
    """`$XDG_CACHE_HOME/kernel-bot`, else `~/.cache/kernel-bot` (the XDG base directory
    specification: an unset, empty or relative XDG_CACHE_HOME is ignored)."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    return (Path(base) if os.path.isabs(base) else Path.home() / ".cache") / "kernel-bot"


@dataclass(frozen=True)
class EvalOptions:
    """How one problem's contenders are verified and timed. The run's are derived from its
    `Settings` (bot.cli.engine_options); a field a setting decides has that setting's default or none."""

    device: Device  # resolved (the settings' "auto" is no device)
    sandbox: SandboxKind = DEFAULTS.sandbox
    limits: Limits = field(default_factory=Limits)
    timing: TimingOptions = field(default_factory=TimingOptions)
    min_speedup: float = DEFAULTS.min_speedup
    trials_per_distribution: int = 1
    parallel: int = max(1, (os.cpu_count() or 2) // 2)  # workers compiling/verifying at once
    # Threads per worker for torch's CPU kernels; None: one on CPU (workers take turns there,
    # and a tiny kernel split over threads is timed by its slowest, descheduled one: A/A runs
    # of gelu on 2 vCPUs moved 100x between workers with 2), torch's default on a GPU.
    threads: int | None = None
    gpu_index: int | None = None
    # Other problems may be evaluated on this GPU at the same time (`bot optimize --jobs N`).
    # A contender still short of memory when re-run alone is then not proven too big: the
    # problem is raised as GpuOutOfMemory, for bot.engine.loop.lanes to run it again after the others.
    beside_others: bool = False
    # The device's memory shared with the other problems on it (bot.engine.workspace.memory_budget);
    # None: no admission, `parallel` contenders at once.
    memory: MemoryBudget | None = None
    # time.monotonic() past which candidates evaluated a few at a time (bot.engine.evaluation.evaluate)
    # start no more: the problem's budget. None: no limit.
    deadline: float | None = None
    # The baseline's trials passed in an earlier run of this evaluation, on the same problem and
    # shapes (bot.engine.evaluation.evaluate._in_groups): its workers are built and timed, and
    # its timed calls checked, but it takes no trials again.
    baseline_trialled: bool = False
    cache_root: Path = field(default_factory=default_cache_root)  # $XDG_CACHE_HOME/kernel-bot
    # Reuse conclusive verdicts and timings of candidates judged before (bot.engine.evaluation.cache). No
    # default: the settings' (on) would let a test or script read and fill the user's cache unasked.
    use_cache: bool = field(kw_only=True)
    # What outputs are compared with (bot.core.tolerance).
    tolerance: TolerancePolicy = DEFAULTS.tolerance
    # The process sandbox runs candidates even where it cannot contain them.
    allow_uncontained: bool = DEFAULTS.allow_uncontained
