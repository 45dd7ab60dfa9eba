"""CLI values and repository settings -> the option objects the pipeline runs with."""

from __future__ import annotations

from bot.core.errors import BotError


def resolve_device(device: str) -> str:
    """ "auto" is cuda when torch sees a GPU; asking for cuda without one is an error."""
    if device != "auto":
        if device == "cuda":
            import torch

            if not torch.cuda.is_available():
                raise BotError("--device cuda: no CUDA GPU is visible to torch")
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def evaluation_options(
    device: str,
    sandbox: str,
    time_cap_s: float | None = None,
    min_speedup: float = 1.05,
    use_cache: bool = False,
    timing_mode: str = "latency",
    replicas: int = 2,
):
    from bot.engine.evaluate import EvalOptions
    from bot.engine.timing import TimingOptions

    # The modes differ only in how GPU work is timed; a CPU is timed by its host clock in every
    # mode, so the options (and the cache key made from them) say so.
    mode = timing_mode if device == "cuda" else "latency"
    timing = TimingOptions(mode=mode, replicas=replicas, **({"time_cap_s": time_cap_s} if time_cap_s else {}))
    return EvalOptions(device=device, sandbox=sandbox, timing=timing, min_speedup=min_speedup, use_cache=use_cache)


def optimize_options(
    device: str,
    sandbox: str,
    strategy: str,
    model: str | None,
    backend: str,
    samples: int,
    budget_s: float,
    max_rounds: int,
    min_speedup: float,
    time_cap_s: float | None,
    max_tokens: int | None,
    exclude: tuple[str, ...] = (),
    use_cache: bool = True,
    timing_mode: str = "latency",
    replicas: int = 2,
    max_plausible_speedup: float = 100.0,
):
    from bot.engine.optimize import OptimizeOptions

    return OptimizeOptions(
        strategy=strategy,
        model=model,
        backend=backend,
        samples=samples,
        budget_s=budget_s,
        max_rounds=max_rounds,
        min_speedup=min_speedup,
        max_plausible_speedup=max_plausible_speedup,
        max_total_tokens=max_tokens,
        exclude=tuple(exclude),
        evaluation=evaluation_options(
            resolve_device(device), sandbox, time_cap_s, min_speedup, use_cache, timing_mode, replicas
        ),
    )


def job_options(settings, device: str | None = None, max_tokens: int | None = None, exclude: tuple[str, ...] = ()):
    resolved = resolve_device(device or settings.device)
    if resolved == "cpu" and not exclude:
        # max-autotune compiles for minutes on a CPU and never wins there.
        exclude = ("compile-max-autotune*",)
    return optimize_options(
        resolved,
        settings.sandbox,
        settings.strategy,
        settings.model,
        settings.backend,
        settings.samples,
        settings.budget_s,
        settings.max_rounds,
        settings.min_speedup,
        settings.time_cap_s,
        max_tokens,
        exclude,
        timing_mode=settings.timing,
        max_plausible_speedup=settings.max_plausible_speedup,
    )
