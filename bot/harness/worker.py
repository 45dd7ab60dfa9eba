"""The program that runs *inside* the sandbox: load, build, run, time, report.

It serves one contender (a candidate, the baseline, or the reference) for the parent, over
the private channel. It never decides a verdict: it reports observations (outputs or
fingerprints of outputs, input hashes, threads, clocks) and the parent judges them against
a reference computed in another process.

Everything the harness relies on is captured at import time, before any candidate code is
imported (bot/harness/shared.py), so a candidate that patches `time.perf_counter_ns`,
`torch.cuda.Event.elapsed_time` or `torch.Tensor.clone` changes what it sees, not what the
harness measures. The checked calls are in bot/harness/checked.py, the timed calls in
bot/harness/timing.py, the machine's description in bot/harness/env.py. Only the standard
library, torch, numpy and (optionally) triton are used.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
from collections import deque
from typing import Any

import torch

from bot.core.distributions import distribution_of
from bot.core.settings import Device
from bot.harness import inputs as worker_inputs
from bot.harness import shared, staging, support, triton_interp
from bot.harness.checked import CheckedCalls
from bot.harness.env import describe_environment, timer_overhead_us
from bot.harness.held import Held
from bot.harness.judge import JudgedCalls, Loan, write_into
from bot.harness.timing import LAUNCHES_KEPT, Rotation, TimedCalls
from bot.harness.tuning_gate import TuningGate
from bot.protocol.batches import Outputs, OutputsReply, Stage, StageInto, StageReply
from bot.protocol.channel import FDS_PER_MESSAGE, Channel, ChannelClosed, close_fds
from bot.protocol.dispatch import parse_request, serve
from bot.protocol.messages import (
    Construct,
    ConstructReply,
    GateReply,
    Hello,
    HelloReply,
    Load,
    LoadReply,
)
from bot.protocol.typed import Done, Message, ProtocolError

# Cached and unused, this much goes back to the GPU after an op (Harness.give_back_cache);
# less stays, so that small shapes' staging and calls allocate nothing anew.
RELEASE_OVER_BYTES = 1 << 30
# Freed GPU memory goes back page by page, not segment by segment: with whole segments one small
# tensor still held (a fingerprint vector, carved from a freed input's segment) keeps the whole
# segment reserved. Idle workers of KernelBench's 47_Sum and 46_Average_Pooling_3D on an H100
# held 8.7 GiB each, their input's size, while the reference ran out of memory beside them.
ALLOCATOR_SETTINGS = "expandable_segments:True"
# Ops whose span the parent's clock measures (a batch's staging and calls, the reference's look
# at the GPU before a window): no cache is given back inside them.
ON_THE_PARENTS_CLOCK = frozenset({"stage", "time", "quiet"})


class Harness(CheckedCalls, JudgedCalls, TimedCalls):
    def __init__(self, channel: Channel, device: str, threads: int | None):
        self.ch = channel
        self.device = device
        self.problem = None
        self.cls = None
        self.precision = "native"
        self.is_reference = False
        self.model = None
        self.native_model = None
        self.get_inputs = None
        self.get_init_inputs = None
        self.roofline_flops = None
        self.flush_buf = None
        self.captured: Rotation | None = None  # mode "graph": this shape's captured calls
        self.replays = 0  # mode "graph": which captured copy replays next
        self.gate: TuningGate | None = None  # set up by op_gate, for code that tunes by timing
        self.cycles_per_us: float | None = None
        self.launch_us: deque[float] = deque(maxlen=LAUNCHES_KEPT)
        self.weights: dict[tuple, torch.Tensor] = {}
        self.tf32_convolutions: bool | None = None
        # One batch at a time (ops "stage", "time", "outputs"): its inputs, drawn before the
        # parent's clock starts, and every call's outputs, kept until the parent has picked
        # the calls it checks in full.
        self.staged: list[list[Any]] | None = None
        self.kept: list[list[torch.Tensor]] = []
        self.held = Held()  # the latest timed calls' outputs, across batches (bot.harness.held)
        self.stub_outputs: list[torch.Tensor] | None = None  # the reference's calibration stub
        # Outputs compared where they lie (bot.harness.judge).
        self.expected: list[torch.Tensor] | None = None
        self.expected_meta: list[dict[str, Any]] = []
        self.lent: dict[str, Loan] = {}
        self.outgoing_fds: list[int] = []
        if threads:
            torch.set_num_threads(threads)
        self._warm_up()
        self.baseline_tids = shared.tids()

    # --- set-up -----------------------------------------------------------------------
    def _warm_up(self) -> None:
        """Start torch's own thread pools and the CUDA context before the thread snapshot."""
        a = torch.randn(256, 256)
        (a @ a).sum().item()
        try:
            import triton  # noqa: F401  (its import-time threads, if any, are the harness's)
        except Exception:
            pass
        try:
            # torch.compile reports progress through tqdm, whose monitor thread would (rightly)
            # fail the thread check; it only polices slow progress bars, so switch it off.
            import tqdm

            tqdm.tqdm.monitor_interval = 0
        except Exception:
            pass
        if self.device == Device.CUDA:
            # Before the first allocation: the settings apply to segments made after them.
            settings = getattr(torch._C, "_accelerator_setAllocatorSettings", None)
            (settings or torch.cuda.memory._set_allocator_settings)(ALLOCATOR_SETTINGS)
            torch.cuda.init()
            b = torch.randn(512, 512, device="cuda")
            (b @ b).sum().item()
            (b.to(torch.bfloat16) @ b.to(torch.bfloat16)).float().sum().item()
            shared.cuda_sync()

    # --- ops --------------------------------------------------------------------------
    def op_load(self, msg: Load) -> dict:
        try:
            self.problem = support.import_file(msg.problem, "kernel_bot_problem")
            for fn in ("get_inputs", "get_init_inputs"):
                if not callable(getattr(self.problem, fn, None)):
                    raise TypeError(f"the problem defines no function {fn}()")
            if not isinstance(getattr(self.problem, "Model", None), type):
                raise TypeError("the problem defines no class Model")
        except Exception as exc:
            return shared.failure("problem", exc)
        self.get_inputs = self.problem.get_inputs
        self.get_init_inputs = self.problem.get_init_inputs
        self.roofline_flops = getattr(self.problem, "roofline_flops", None)
        self.precision = msg.precision
        self.is_reference = msg.module is None
        if msg.module is None:
            self.cls = self.problem.Model
        else:
            try:
                sys.path.insert(0, os.path.dirname(msg.module))
                module = support.import_file(msg.module, "kernel_bot_candidate")
                self.cls = getattr(module, msg.class_name, None)
                if not isinstance(self.cls, type):
                    raise TypeError(f"the candidate defines no class {msg.class_name}")
                if triton_interp.needed():
                    triton_interp.mend_bf16_dot()
            except BaseException as exc:  # SystemExit from a candidate is a failure too
                return shared.failure("import", exc)
        return LoadReply(new_threads=self._new_threads()).to_wire()

    def op_construct(self, msg: Construct) -> dict:
        try:
            for key, value in msg.overrides.items():
                setattr(self.problem, key, value)
            init = self.get_init_inputs()
            if not isinstance(init, (list, tuple)):
                raise TypeError(f"get_init_inputs() returned {type(init).__name__}, expected a list")
        except Exception as exc:
            return shared.failure("problem", exc)
        seed = msg.seed
        try:
            with torch.no_grad():
                reference = None
                if self.cls is not self.problem.Model:
                    torch.manual_seed(seed)
                    reference = self.problem.Model(*init)
                torch.manual_seed(seed)
                model = self.cls(*init)
                if reference is not None:
                    support.copy_matching_state(reference, model)
                    del reference
                if isinstance(model, torch.nn.Module):
                    model = model.to(self.device)
                self.native_model = model
                if self.precision != "native":
                    torch.manual_seed(seed)
                    upcast = self.cls(*init).to(self.device)
                    self.model = upcast.to(getattr(torch, self.precision))
                else:
                    self.model = model
        except BaseException as exc:
            return shared.failure("construct", exc)
        params = sum(p.numel() * p.element_size() for p in support.module_tensors(self.native_model))
        return ConstructReply(param_bytes=params, new_threads=self._new_threads()).to_wire()

    def _inputs(self, seed: int) -> list[Any]:
        shared.seed_cpu(seed)
        if self.device == Device.CUDA:
            shared.seed_cuda(seed)
        with torch.device(self.device):
            inputs = self.get_inputs()
        if not isinstance(inputs, (list, tuple)):
            raise support.ProblemShapeError(f"get_inputs() returned {type(inputs).__name__}, expected a list")
        moved = [shared.to(x, self.device) if shared.is_tensor(x) else x for x in inputs]
        return worker_inputs.transform(moved, distribution_of(seed), seed)

    def _upcast(self, inputs: list[Any]) -> list[Any]:
        if self.precision == "native":
            return inputs
        dtype = getattr(torch, self.precision)
        return [shared.to(x, dtype) if shared.is_tensor(x) and x.is_floating_point() else x for x in inputs]

    def op_stage(self, msg: Stage | StageInto) -> dict:
        """A batch's inputs, before the parent opens its timing window (docs/verifier.md,
        "timed calls"). StageInto: empty buffers of that layout, which the parent fills
        from outside while this worker is frozen; their addresses come back. Otherwise drawn
        here from the parent's seeds; with `expose` (the reference) described for the parent to
        copy, where the layout can carry them."""
        self.staged, self.kept = None, []
        if isinstance(msg, StageInto):
            try:
                self.staged = staging.allocate(msg.layout)
            except (KeyError, TypeError, ValueError, AttributeError, RuntimeError) as exc:
                return shared.failure("protocol", exc)
            return StageReply(regions=staging.regions(self.staged)).to_wire()
        try:
            self.staged = [self._inputs(seed) for seed in msg.seeds]
        except Exception as exc:
            return shared.failure("problem", exc)
        if msg.stub:
            self._make_stub(msg.meta)
        if msg.expose:
            self.staged = staging.contiguous(self.staged)
            try:
                laid_out = staging.layout(self.staged)
            except staging.NotLaidOut as exc:
                return StageReply(why=str(exc)).to_wire()
            return StageReply(layout=laid_out, regions=staging.regions(self.staged)).to_wire()
        return Done().to_wire()

    def op_outputs(self, msg: Outputs) -> dict:
        """The full outputs of the batch's calls the parent picked after the batch, then the
        batch is dropped; its outputs join those held (the parent's `hold_calls`)."""
        lent = self.ch.take_fds() if self.ch is not None else []
        self.held.keep(self.kept, msg.hold_calls)
        try:
            outputs = [[shared.detach(o) for o in self.kept[i]] for i in msg.picks]
            if msg.into is not None:
                outputs = self._write_picks(outputs, lent, msg.into)
        except (IndexError, ValueError) as exc:
            return shared.failure("protocol", exc)
        except Exception as exc:
            return shared.failure("call", exc)
        finally:
            close_fds(lent)
            self.staged, self.kept = None, []
        return OutputsReply(outputs=outputs).to_wire()

    def give_back_cache(self) -> None:
        """After each op: where the allocator holds RELEASE_OVER_BYTES or more that no tensor
        uses, it goes back to the GPU. Workers wait between their ops (a contender frozen
        between its batches, the reference between contenders' calls) while other processes
        need that memory: on KernelBench's 19_ReLU on the H100 the reference's float64
        temporaries of earlier ops, cached, held most of its 54.7 GiB, and contenders' last
        batches of 47_Sum (an 8 GiB input) held theirs. The next op that needs it allocates
        it again, as every worker's does alike for such a shape."""
        if self.device != Device.CUDA:
            return
        if shared.cuda_reserved() - shared.cuda_allocated() >= RELEASE_OVER_BYTES:
            shared.cuda_sync()
            torch.cuda.empty_cache()

    def _write_picks(self, outputs: list[list[torch.Tensor]], fds: list[int], sizes: list[int]) -> list[list]:
        """Each picked call's outputs written into its blocks (as many per call as it has
        outputs, pick after pick); nothing is sent."""
        per_call = len(sizes) // max(len(outputs), 1)
        if per_call * len(outputs) != len(sizes) or len(fds) != len(sizes):
            raise ValueError(f"{len(sizes)} blocks named, {len(fds)} descriptors, for {len(outputs)} picked calls")
        for n, call in enumerate(outputs):
            part = slice(n * per_call, (n + 1) * per_call)
            write_into(self.device, fds[part], sizes[part], call)
        return [[] for _ in outputs]

    def _make_stub(self, metas: list[dict]) -> None:
        """The reference's stand-in for a contender in the calibration batches: a call that does
        nothing and returns outputs of the contender's dtypes and shapes, so that what remains on
        the parent's clock is the harness's own work for such outputs (bot.engine.timing.interleaved)."""
        wanted = [(m["dtype"], tuple(m["shape"])) for m in metas]
        have = [(str(o.dtype).removeprefix("torch."), tuple(o.shape)) for o in self.stub_outputs or []]
        if have != wanted:
            self.stub_outputs = [
                shared.to(torch.randn(shape, dtype=torch.float32, device=self.device), getattr(torch, dtype))
                for dtype, shape in wanted
            ]

    def op_gate(self, msg: Message) -> dict:
        """Hook the timing of kernel variants (bot.harness.tuning_gate): in a call the bot marks as
        gated, the first such timing asks it for the GPU. Replies with what could be hooked."""
        if self.gate is None:
            self.gate = TuningGate(self.ch, shared.cuda_sync if self.device == Device.CUDA else lambda: None)
        return GateReply(hooks=self.gate.install()).to_wire()

    def op_release(self, msg: Message) -> dict:
        """Give the allocator's cached GPU memory back while this worker waits: workers of
        several candidates and problems share one GPU, and idle caches made them run out.
        The fingerprint vectors go too (float64, the outputs' size: 512 MB each for an
        8192x8192 output, up to four kept); they are drawn again from their seed on demand."""
        self.weights.clear()
        self.captured = None  # a CUDA graph's private memory pool goes with it
        self.forget_lent()  # the reference's kept outputs and lent blocks
        if self.device == Device.CUDA:
            shared.cuda_sync()
            torch.cuda.empty_cache()
        return Done().to_wire()

    # --- helpers ----------------------------------------------------------------------
    def _new_threads(self) -> list[str]:
        extra = shared.tids() - self.baseline_tids
        names = sorted(t.name for t in shared.threads() if t is not threading.main_thread())
        return sorted(extra) + [f"python:{n}" for n in names]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bot-worker")
    parser.add_argument("--channel", required=True)
    args = parser.parse_args(argv)
    channel = Channel(support.connect(args.channel))
    channel.fd_room = FDS_PER_MESSAGE
    hello = parse_request(channel.recv())  # the only unsigned frame: it carries the run key
    if not isinstance(hello, Hello):
        raise ProtocolError(f"expected a hello, got op {hello.op!r}")
    channel.key = bytes.fromhex(hello.key)
    harness = Harness(channel, hello.device, hello.threads)
    # Sent before any candidate code exists here: the parent's count of this process's threads
    # starts from it (bot.engine.workers.client, WorkerClient.threads_seen).
    channel.send(
        HelloReply(
            env=describe_environment(hello.device, hello.describe),
            overhead_us=timer_overhead_us(hello.device),
            threads=len(harness.baseline_tids),
        ).to_wire()
    )
    ops = {
        "load": harness.op_load,
        "construct": harness.op_construct,
        "run": harness.op_run,
        "time": harness.op_time,
        "fingerprints": harness.op_fingerprints,
        "stage": harness.op_stage,
        "outputs": harness.op_outputs,
        "quiet": harness.op_quiet,
        "release": harness.op_release,
        "gate": harness.op_gate,
        "lend": harness.op_lend,
        "judge": harness.op_judge,
    }
    while True:
        try:
            msg = channel.recv()
        except ChannelClosed:
            return
        if msg.get("op") == "exit":
            return
        reply = serve(ops, msg)
        if msg.get("op") not in ON_THE_PARENTS_CLOCK:
            harness.give_back_cache()  # before the reply: frozen after it, the worker could not
        fds = harness.take_outgoing()
        try:
            channel.send(reply, fds=fds)
        finally:
            close_fds(fds)  # the bot holds its own copies now


if __name__ == "__main__":
    main()
