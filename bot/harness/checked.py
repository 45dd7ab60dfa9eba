"""The harness's checked calls (ops "run" and "fingerprints"): one call of the model on inputs
drawn from the parent's seed, answered with its full outputs, their fingerprints or both, for
the parent to compare with the reference's from another process.

A part of bot.harness.worker.Harness, kept apart for size as bot/harness/timing.py is: the
harness supplies the models, their device and precision, the inputs drawn from a seed
(`_inputs`, `_upcast`), the gate and the thread listing (`_new_threads`). The fingerprints
(`_fingerprints`, `_fingerprint_tensors`) live here and serve the timed calls too.
"""

from __future__ import annotations

import contextlib
import math
import sys
from dataclasses import replace
from typing import Any

import torch

from bot.core.settings import Device
from bot.harness import shared, support
from bot.harness.judge import write_into
from bot.harness.own_error import CHUNK_ELEMENTS, own_error
from bot.harness.tf32 import Tf32Convolutions
from bot.harness.tuning_gate import TuningGate
from bot.protocol.channel import close_fds
from bot.protocol.messages import Fingerprints, FingerprintsReply, Run, RunReply

TF32_DEVICES = (Device.CUDA,)  # where cuDNN may compute a float32 convolution in TF32


class CheckedCalls:
    """The checked-call ops; the state they keep lives on the harness (see bot.harness.worker.Harness)."""

    device: str
    precision: str
    is_reference: bool  # the problem's own Model, started as the reference (bot.harness.worker)
    model: Any
    native_model: Any  # the model in the problem's own precision (the reference's is upcast)
    roofline_flops: Any  # the problem's roofline_flops(*inputs), if it defines one
    gate: TuningGate | None
    weights: dict[tuple, torch.Tensor]  # the fingerprints' random vectors, a few at a time
    ch: Any  # the channel (bot.protocol.channel.Channel): descriptors that came with a request
    forget: Any  # bot.harness.judge.JudgedCalls.forget
    keep: Any  # bot.harness.judge.JudgedCalls.keep
    # Whether the problem's Model has float32 convolutions TF32 could compute (None: not yet seen).
    tf32_convolutions: bool | None

    def op_run(self, msg: Run) -> dict:
        """One checked call: full outputs (or fingerprints) for the parent to compare, or its
        outputs written into blocks the reference lent (`msg.into`), whose descriptors came with
        the request (a harness in the bot's own process has no channel)."""
        lent = self.ch.take_fds() if self.ch is not None else []
        try:
            return self._run(msg, lent)
        finally:
            close_fds(lent)

    def _run(self, msg: Run, lent: list[int]) -> dict:
        try:
            inputs = self._inputs(msg.seed)
        except Exception as exc:
            return shared.failure("problem", exc)
        # Checks of timed calls (requests that say what they want) compare outputs only. Hashing the inputs
        # goes through host memory: for 2 GB of logits it cost seconds per timed batch.
        before = [] if msg.want else [shared.hash_tensor(x) if shared.is_tensor(x) else repr(x) for x in inputs]
        if self.is_reference:  # values from the upcast model, where its precision is not native
            self.forget()  # a kept trial's outputs go before this one's are computed
            return self._reference_run(inputs, before, msg)
        if self.device == Device.CUDA:
            support.poison_free_cuda_memory()
        gated = self.gate.gated_call() if msg.gate and self.gate is not None else contextlib.nullcontext()
        try:
            with torch.no_grad():
                shared.cuda_sync() if self.device == Device.CUDA else None
                t0 = shared.perf_ns()
                with gated:
                    result = self.model(*inputs)
                shared.cuda_sync() if self.device == Device.CUDA else None
                host_us = (shared.perf_ns() - t0) / 1e3
        except BaseException as exc:
            return shared.failure("call", exc)
        outputs = shared.as_outputs(result)
        metas = [support.meta(o) for o in outputs]
        after = [shared.hash_tensor(x) if shared.is_tensor(x) else repr(x) for x in inputs]
        reply = RunReply(
            meta=metas,
            inputs_before=before,
            inputs_after=after,
            host_us=host_us,
            new_threads=self._new_threads(),
            tuning=self.gate.account() if msg.gate and self.gate is not None else None,
        )
        if msg.into is not None:
            tensors = all(m["type"] == "Tensor" for m in metas)
            try:
                write_into(self.device, lent, msg.into, [shared.detach(o) for o in outputs] if tensors else [])
            except Exception as exc:
                return shared.failure("call", exc)
        elif all(m["type"] == "Tensor" for m in metas):
            reply = self._answer(reply, [shared.detach(o) for o in outputs], msg)
        return reply.to_wire()

    def _answer(self, reply: RunReply, values: list[torch.Tensor], msg: Run) -> RunReply:
        """Outputs and/or fingerprints, as the request says it wants them (a reference of native
        precision answers timed-call checks through op_run too)."""
        prints = self._fingerprints(values, int(msg.fp_seed)) if msg.want in ("fingerprint", "both") else None
        return replace(reply, fingerprints=prints, outputs=values if msg.want != "fingerprint" else None)

    def _answers_only_its_inputs(self, native: list[Any], seed: int, cuda: bool) -> None:
        """The problem's own Model called again on its inputs (drawn again: a Model may write to
        its own; each answer freed before the next, and all before the oracle's copies): from the
        same random state it must give the same answer (Nondeterministic), and from another one
        too (DrawsInForward): a timed call's inputs are staged, and its call cannot start from the
        random state a trial's does."""
        _same_answer(native, shared.as_outputs(self.native_model(*self._inputs(seed))), Nondeterministic)
        inputs = self._inputs(seed)
        shared.seed_cpu(seed ^ OTHER_STATE)
        if cuda:
            shared.seed_cuda(seed ^ OTHER_STATE)
        _same_answer(native, shared.as_outputs(self.native_model(*inputs)), DrawsInForward)

    def _reference_run(self, inputs: list[Any], before: list[str], msg: Run) -> dict:
        cuda = self.device == Device.CUDA
        try:
            oracle = self.precision != "native"
            with torch.no_grad():
                if cuda:  # the footprint, inputs included (no candidate code runs in this process)
                    torch.cuda.reset_peak_memory_stats()
                native = shared.as_outputs(self.native_model(*inputs))
                native_peak = torch.cuda.max_memory_allocated() if cuda else None
                if msg.repeat:
                    self._answers_only_its_inputs(native, msg.seed, cuda)
                exact = shared.as_outputs(self.model(*self._upcast(inputs))) if oracle else native
            metas = [support.meta(o) for o in native]
            if any(m["type"] != "Tensor" for m in metas):
                raise TypeError(f"Model.forward returned {[m['type'] for m in metas]}, expected tensors")
            # Only where the trial is a full one: the timed calls' checks hold the shape's rule.
            errors = [own_error(n, e) for n, e in zip(native, exact)] if oracle and msg.want is None else None
            if errors is not None and self._convolutions_may_run_in_tf32():
                errors = self._as_tf32_could_make_it(msg.seed, exact, errors)
            values = []
            for n, e in zip(native, exact):
                dtype = support.transfer_dtype(n.dtype)
                values.append(shared.to(e, dtype) if dtype is not None else shared.to(e, n.dtype))
            peak = torch.cuda.max_memory_allocated() if cuda else None
        except Exception as exc:
            return shared.failure("problem", exc)
        nbytes = sum(x.numel() * x.element_size() for x in inputs if shared.is_tensor(x))
        nbytes += sum(o.numel() * o.element_size() for o in native)
        nbytes += sum(p.numel() * p.element_size() for p in support.module_tensors(self.native_model))
        flops = None
        if callable(self.roofline_flops):
            try:
                flops = int(self.roofline_flops(*inputs))
            except Exception as exc:
                return shared.failure("problem", exc)
        kept = msg.send_up_to is not None and sum(v.numel() * v.element_size() for v in values) > msg.send_up_to
        if kept:  # compared where they lie (bot.harness.judge), never sent
            self.keep(values, metas)
        reply = RunReply(
            meta=metas,
            inputs_before=before,
            kept=kept,
            bytes=nbytes,
            flops=flops,
            native_peak_bytes=native_peak,
            peak_bytes=peak,
            input_meta=[
                f"{str(x.dtype).removeprefix('torch.')}{list(x.shape)}" if shared.is_tensor(x) else repr(x)
                for x in inputs
            ],
            own_error=errors,
        )
        # Kept: never sent, but fingerprinted where asked (a picked timed call's commitment).
        answered = self._answer(reply, values, msg)
        return (replace(answered, outputs=None) if kept else answered).to_wire()

    def _convolutions_may_run_in_tf32(self) -> bool:
        """On a GPU under cuDNN's default (TF32 allowed), unless the model was seen to have no
        float32 convolution: then its trials need no second call."""
        on_gpu = self.device in TF32_DEVICES
        return on_gpu and bool(torch.backends.cudnn.allow_tf32) and self.tf32_convolutions is not False

    def _as_tf32_could_make_it(
        self, seed: int, exact: list[torch.Tensor], errors: list[list[float]]
    ) -> list[list[float]]:
        """The problem's own error, the larger of the call as it ran and the call with its float32
        convolutions computed as cuDNN's TF32 algorithms compute them (bot.harness.tf32): which
        of the two cuDNN takes moves with the memory free, from trial to trial and from the
        reference to its baseline. Its inputs are drawn again (a Model may write to its own)."""
        mode = Tf32Convolutions(self.device)
        try:
            inputs = self._inputs(seed)
            with torch.no_grad(), mode:
                emulated = shared.as_outputs(self.native_model(*inputs))
            del inputs
        except Exception as exc:  # the problem's answer stands; only its bound is not widened
            print(f"float32 convolutions not emulated in TF32: {type(exc).__name__}: {exc}", file=sys.stderr)
            self.tf32_convolutions = False
            return errors
        self.tf32_convolutions = mode.convolutions > 0
        if not self.tf32_convolutions:
            return errors
        widened = [own_error(t, e) for t, e in zip(emulated, exact)]
        return [[max(a, b) for a, b in zip(ran, tf32)] for ran, tf32 in zip(errors, widened)]

    def op_fingerprints(self, msg: Fingerprints) -> dict:
        """Reference fingerprints and full outputs for a list of seeds: the checks of the calls
        the parent picked from a timed batch."""
        prints, outputs = [], []
        for seed in msg.seeds:
            reply = self.op_run(Run(seed=seed, want=msg.want, fp_seed=msg.fp_seed))
            if not reply.get("ok"):
                return reply
            prints.append(reply.get("fingerprints"))
            outputs.append(reply.get("outputs"))
        return FingerprintsReply(fingerprints=prints, outputs=outputs).to_wire()

    def _fingerprints(self, outputs: list[torch.Tensor], fp_seed: int) -> list[list[float]]:
        """Per output: (projection on a secret random vector, 2-norm, non-finite count)."""
        return [t.tolist() for t in self._fingerprint_tensors(outputs, fp_seed)]

    def _fingerprint_tensors(self, outputs: list[torch.Tensor], fp_seed: int) -> list[torch.Tensor]:
        """The same, as float64 tensors on the outputs' device: no host synchronisation, so
        back-to-back timed calls stay back to back."""
        result = []
        for i, out in enumerate(outputs):
            key = (i, tuple(out.shape), out.device.type, fp_seed)
            w = self.weights.get(key)
            if w is None:
                w = shared.fingerprint_weights(tuple(out.shape), out.device, fp_seed + i)
                if len(self.weights) >= 4:  # a few output sizes at a time: bounded memory
                    self.weights.clear()
                self.weights[key] = w
            result.append(shared.fingerprint(out, w))
        return result


# Two calls of the problem's own code on the same inputs, from the same random state (its
# seed's), differ by more than this, normwise: its answer is not a function of its inputs and
# seed. Atomic sums and a cuDNN algorithm's order move an answer by float rounding (1e-7 of a
# float32 one, 1e-2 of some bfloat16 elements, far less normwise); a draw from a generator of
# its own or from the clock moves it by tens of percent.
REPEAT_NORM_REL = 1e-3


class Nondeterministic(Exception):
    """The problem's own output changes between calls on the same inputs and random state."""

    def __str__(self) -> str:
        return (
            f"the problem's own Model answered the same inputs, from the same random state, "
            f"differently on a second call ({self.args[0]}): its output is not a function of its "
            "inputs and seed (a generator of its own, the clock?), so no candidate can be verified "
            "against it"
        )


class DrawsInForward(Exception):
    """The problem's own output depends on the random state its call starts from."""

    def __str__(self) -> str:
        return (
            f"the problem's own Model answered the same inputs differently from another random "
            f"state ({self.args[0]}): it draws random numbers in forward (dropout in training "
            "mode?), and a timed call cannot start from the random state of the trial it is checked "
            "against, so no candidate can be verified against it"
        )


# The seed of the other random state: any other than the call's own.
OTHER_STATE = 0x5DEECE66D


def _same_answer(first: list[torch.Tensor], second: list[torch.Tensor], fault: type[Exception]) -> None:
    """Raise `fault` where `second` is another answer than `first`: no candidate can be verified
    against an answer that changes, and without this the problem's own baseline fails the values
    check with no word of why. In chunks (bot.harness.own_error.CHUNK_ELEMENTS): float64 copies
    of a multi-GiB output would not fit beside it."""
    for i, (a, b) in enumerate(zip(first, second)):
        if not (shared.is_tensor(a) and shared.is_tensor(b)) or a.shape != b.shape:
            continue
        xs, ys = a.detach().reshape(-1), b.detach().reshape(-1)
        diff_sq = ref_sq = 0.0
        pattern = False
        for start in range(0, xs.numel(), CHUNK_ELEMENTS):
            x = xs[start : start + CHUNK_ELEMENTS].to(torch.float64)
            y = ys[start : start + CHUNK_ELEMENTS].to(torch.float64)
            fx, fy = torch.isfinite(x), torch.isfinite(y)
            both = fx & fy
            pattern = pattern or bool((fx != fy).any())
            zero = torch.zeros((), dtype=torch.float64, device=x.device)
            diff_sq += float(torch.where(both, x - y, zero).square().sum())
            ref_sq += float(torch.where(both, x, zero).square().sum())
        diff, scale = math.sqrt(diff_sq), max(math.sqrt(ref_sq), 1e-300)
        if pattern or diff > REPEAT_NORM_REL * scale:
            raise fault(
                f"output {i}: normwise difference {diff / scale:.3g}"
                + (", other non-finite positions" if pattern else "")
            )
