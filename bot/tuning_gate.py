"""Inside a worker: code that tunes by timing asks the bot for the GPU while it times.

Triton's autotuner and Inductor (max-autotune, coordinate descent, multi-kernel) pick their
kernels at the first call by timing variants. Timed beside other contenders' trials they keep
picks that only looked faster: on the H200, fp8_quant's prefill compiled with coordinate
descent ran 62 µs in a search and 40 µs compiled alone (fifteenth session). Giving such a
contender the GPU for its whole first call also queues its compilation, seconds of CPU each,
behind the others'. So during a gated trial call every timing of variants asks the parent over
the worker's channel ("want"), runs once the parent holds the GPU exclusively ("granted"), and
hands it back ("done", then "resumed" once the parent shares it again): compilation overlaps
with other trials, the timing of variants does not.

Nothing here decides a verdict: a candidate that asks without cause only waits for the GPU,
and one that never says "done" holds it until its call times out and the worker is killed.
"""

from __future__ import annotations

import functools
import threading
from typing import Any, Callable

# Where variants are timed: Inductor's benchmarker (its autotuning, coordinate descent and
# multi-kernel choice all go through it) and Triton's autotuner (one config per call).
INDUCTOR_BENCHMARKING = "torch._inductor.runtime.benchmarking"


class TuningGate:
    def __init__(self, channel: Any, synchronize: Callable[[], None]):
        self.channel = channel
        self.synchronize = synchronize  # queued kernels finish before the GPU changes hands
        self.active = False  # only during a gated trial call; timing calls never ask
        self.hooks: list[str] = []
        self._depth = 0  # a timing inside a timing (Inductor's classes call their parents) asks once
        self._lock = threading.RLock()

    def wrap(self, timing: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(timing)
        def timed_with_the_gpu_to_itself(*args: Any, **kwargs: Any) -> Any:
            if not self.active:
                return timing(*args, **kwargs)
            with self._lock:
                if self._depth:
                    return timing(*args, **kwargs)
                self._ask("want", "granted")
                self._depth = 1
                try:
                    return timing(*args, **kwargs)
                finally:
                    self._depth = 0
                    self._ask("done", "resumed")
        timed_with_the_gpu_to_itself.kernel_bot_gated = True  # type: ignore[attr-defined]
        return timed_with_the_gpu_to_itself

    def _ask(self, said: str, expected: str) -> None:
        self.synchronize()
        self.channel.send({"gate": said})
        answer = self.channel.recv()
        if answer.get("gate") != expected:
            raise RuntimeError(f"tuning gate: said {said!r}, the bot answered {answer!r}")

    def install(self) -> list[str]:
        """Hook every timing entry point this process's torch and Triton have, once; the names
        hooked (none: the bot runs this contender's trials alone instead)."""
        if self.hooks:
            return self.hooks
        try:
            import importlib

            benchmarking = importlib.import_module(INDUCTOR_BENCHMARKING)
        except Exception:  # an older torch, or none of Inductor: nothing of it to hook
            benchmarking = None
        for name, cls in vars(benchmarking).items() if benchmarking else ():
            if isinstance(cls, type) and cls.__module__ == INDUCTOR_BENCHMARKING:
                for method, fn in list(vars(cls).items()):
                    if method.startswith("benchmark_gpu") and callable(fn):
                        self._hook(cls, method, f"{name}.{method}")
        try:
            from triton.runtime.autotuner import Autotuner
        except Exception:
            Autotuner = None
        if Autotuner is not None and callable(vars(Autotuner).get("_bench")):
            self._hook(Autotuner, "_bench", "triton Autotuner._bench")
        return self.hooks

    def _hook(self, owner: type, attribute: str, label: str) -> None:
        current = vars(owner)[attribute]
        if not getattr(current, "kernel_bot_gated", False):
            setattr(owner, attribute, self.wrap(current))
        self.hooks.append(label)
