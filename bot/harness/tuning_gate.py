"""Inside a worker: code that tunes by timing asks the bot for the GPU before it times.

Triton's autotuner and Inductor (max-autotune, coordinate descent, multi-kernel) pick their
kernels at the first call by timing variants. Timed beside other contenders' trials they keep
picks that only looked faster, their variants timed on a busy GPU (docs/verifier.md). Giving such a
contender the GPU for its whole first call also queues its compilation (tracing, lowering,
code generation: seconds of CPU each) behind the others'. So in a gated trial call the first
timing of variants asks the parent over the worker's channel ("want") and runs once the parent
holds the GPU exclusively ("granted"); the parent keeps it so until the call returns. The
compilation before it overlaps with other trials; the timing does not share the GPU. One
grant per call, not one per timing: every grant waits for the other trials' current calls to
end, and an autotuner times dozens of variants.

Nothing here decides a verdict: a candidate that asks without cause only waits for the GPU,
and one that asks outside a gated call is failed by the bot. The call's reply carries the
worker's own account of its timings (`account`): when the first began and the last ended, and
how many; the bot only quotes it, beside its own clock's figure of the hold.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from bot.protocol.messages import GateAnswer, GateAsk

# Where variants are timed: Inductor's benchmarker (its autotuning, coordinate descent and
# multi-kernel choice all go through it) and Triton's autotuner (one config per call).
INDUCTOR_BENCHMARKING = "torch._inductor.runtime.benchmarking"


class TuningGate:
    def __init__(self, channel: Any, synchronize: Callable[[], None]):
        self.channel = channel
        self.synchronize = synchronize  # this worker's queued kernels end before the GPU changes hands
        self.hooks: list[str] = []
        self._active = False  # only during a gated trial call; timing calls never ask
        self._granted = False
        self._lock = threading.Lock()
        self._began = 0.0  # the gated call's start (perf_counter)
        self._spans: list[tuple[float, float]] = []  # its timings', from the call's start

    @contextlib.contextmanager
    def gated_call(self) -> Iterator[None]:
        """Around one gated trial call: the first timing in it asks for the GPU, and the bot
        holds it for this worker until the call's reply."""
        self._active, self._granted = True, False
        self._began, self._spans = time.perf_counter(), []
        try:
            yield
        finally:
            self._active = False

    def account(self) -> list[float] | None:
        """The last gated call's timings: [when the first began, when the last ended, how many],
        seconds from the call's start; None where it timed nothing."""
        with self._lock:
            spans = list(self._spans)
        if not spans:
            return None
        return [min(b for b, _ in spans), max(e for _, e in spans), float(len(spans))]

    def wrap(self, timing: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(timing)
        def timed_with_the_gpu_to_itself(*args: Any, **kwargs: Any) -> Any:
            if not self._active:
                return timing(*args, **kwargs)
            with self._lock:
                if self._active and not self._granted:
                    self._ask_for_the_gpu()
                    self._granted = True
            began = time.perf_counter()
            try:
                return timing(*args, **kwargs)
            finally:
                with self._lock:
                    self._spans.append((began - self._began, time.perf_counter() - self._began))

        timed_with_the_gpu_to_itself.kernel_bot_gated = True  # type: ignore[attr-defined]
        return timed_with_the_gpu_to_itself

    def _ask_for_the_gpu(self) -> None:
        self.synchronize()
        self.channel.send(GateAsk("want").to_wire())
        answer = self.channel.recv()
        if answer.get("gate") != GateAnswer.GRANTED:
            raise RuntimeError(f"tuning gate: asked for the GPU, the bot answered {answer!r}")

    def install(self) -> list[str]:
        """Hook every timing entry point this process's torch and Triton have, once; the names
        hooked (none: the bot runs this contender's trials alone instead)."""
        if self.hooks:
            return self.hooks
        try:
            classes = vars(importlib.import_module(INDUCTOR_BENCHMARKING)).items()
        except Exception:  # an older torch, or none of Inductor: nothing of it to hook
            classes = {}.items()
        for name, cls in classes:
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
