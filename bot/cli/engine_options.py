"""The run's `Settings` -> the option objects the engine runs with; nothing else builds them."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from bot.core.errors import BotError
from bot.core.settings import Device, DeviceChoice, Settings, TimingMode

if TYPE_CHECKING:
    from bot.engine.evaluation.options import EvalOptions
    from bot.engine.loop.attempts import OptimizeOptions


def resolve_device(device: str) -> Device:
    """ "auto" is cuda when torch sees a GPU; asking for cuda without one is an error."""
    if device != DeviceChoice.AUTO:
        if device == DeviceChoice.CUDA:
            import torch

            if not torch.cuda.is_available():
                raise BotError("--device cuda: no CUDA GPU is visible to torch")
        return Device(device)
    import torch

    return Device.CUDA if torch.cuda.is_available() else Device.CPU


def evaluation_options(settings: Settings, device: Device | None = None) -> EvalOptions:
    """`device`: the resolved device; by default the settings' own, resolved."""
    from bot.engine.evaluation.options import EvalOptions
    from bot.engine.timing.records import TimingOptions

    device = device or resolve_device(settings.device)
    # The modes differ only in how GPU work is timed; a CPU is timed by its host clock in every
    # mode, so the options (and the cache key made from them) say so.
    mode = settings.timing if device == Device.CUDA else TimingMode.LATENCY
    return EvalOptions(
        device=device,
        sandbox=settings.sandbox,
        timing=TimingOptions(mode=mode, replicas=settings.replicas, time_cap_s=settings.time_cap_s),
        min_speedup=settings.min_speedup,
        use_cache=settings.use_cache,
        tolerance=settings.tolerance,
        allow_uncontained=settings.allow_uncontained,
    )


# `bot verify` times only to check the calls made while timing (caching, streams, the floor):
# a short phase of a few samples is enough for that, and nothing is read from or put in the cache.
VERIFY_TIME_CAP_S = 0.3
VERIFY_MIN_SAMPLES = 5


def verify_options(settings: Settings) -> EvalOptions:
    """`bot verify`'s options: the settings' own, with the short timed phase above."""
    options = evaluation_options(replace(settings, time_cap_s=VERIFY_TIME_CAP_S, use_cache=False))
    return replace(options, timing=replace(options.timing, min_samples=VERIFY_MIN_SAMPLES))


def optimize_options(settings: Settings, device: Device | None = None) -> OptimizeOptions:
    """`device`: as for `evaluation_options`."""
    from bot.engine.loop.attempts import OptimizeOptions

    return OptimizeOptions(
        strategy=settings.strategy,
        model=settings.model,
        backend=settings.backend,
        samples=settings.samples,
        budget_s=settings.budget_s,
        max_rounds=settings.max_rounds,
        min_speedup=settings.min_speedup,
        max_plausible_speedup=settings.max_plausible_speedup,
        max_tokens=settings.max_tokens,
        exclude=settings.exclude,
        evaluation=evaluation_options(settings, device),
    )


def job_options(settings: Settings) -> OptimizeOptions:
    """A pipeline job's options: the device resolved, and on a CPU the search's max-autotune
    compiles left out unless the user chose what to leave out (minutes there, never a win)."""
    resolved = resolve_device(settings.device)
    if resolved == Device.CPU and not settings.exclude:
        settings = replace(settings, exclude=("compile-max-autotune*",))
    return optimize_options(settings, resolved)
