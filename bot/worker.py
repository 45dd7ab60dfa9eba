"""The program that runs *inside* the sandbox: load, build, run, time, report.

It serves one contender (a candidate, the baseline, or the reference) for the parent, over
the private channel. It never decides a verdict: it reports observations (outputs or
fingerprints of outputs, input hashes, threads, clocks) and the parent judges them against
a reference computed in another process.

Everything the harness relies on is captured at import time, before any candidate code is
imported, so a candidate that patches `time.perf_counter_ns`, `torch.cuda.Event.elapsed_time`
or `torch.Tensor.clone` changes what it sees, not what the harness measures.
Only the standard library, torch, numpy and (optionally) triton are used here.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.util
import os
import platform
import socket
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable

import torch

from bot import triton_interp
from bot.channel import Channel, ChannelClosed
from bot.tuning_gate import TuningGate

# --- originals, captured before any candidate code exists in this process -------------
_perf_ns = time.perf_counter_ns
# Each timed call's inputs are drawn from its seed: the generators seeded directly, as
# torch.manual_seed would, without the traceback it formats per call for CUDA's lazy seeding
# (80 of the harness's 310 us per timed call on CPU).
_seed_cpu = torch.default_generator.manual_seed
_seed_cuda = torch.cuda.manual_seed
_listdir = os.listdir
_sha256 = hashlib.sha256
_threads = threading.enumerate
_Tensor = torch.Tensor
_is_tensor = torch.is_tensor
_detach = torch.Tensor.detach
_contig = torch.Tensor.contiguous
_to = torch.Tensor.to
_reshape = torch.Tensor.reshape
_view = torch.Tensor.view
_numel = torch.Tensor.numel
_clone = torch.Tensor.clone
_cuda_sync = torch.cuda.synchronize
_Event = torch.cuda.Event
_ev_record = torch.cuda.Event.record
_ev_elapsed = torch.cuda.Event.elapsed_time
_copy_ = torch.Tensor.copy_
_sum = torch.Tensor.sum
_CUDAGraph = torch.cuda.CUDAGraph
_graph_capture = torch.cuda.graph
_graph_replay = torch.cuda.CUDAGraph.replay
_Stream = torch.cuda.Stream
_stream_ctx = torch.cuda.stream
_current_stream = torch.cuda.current_stream
_gpu_sleep = torch.cuda._sleep  # spins one GPU thread for a number of clock cycles
_cuda_reserved = torch.cuda.memory_reserved
_cuda_available = torch.cuda.is_available

FLUSH_BYTES = 256 << 20  # larger than the 60 MB L2 of an H200, as in KernelBench

# Mode "graph" replays several captured copies of a call in turn, each with its own input and
# output tensors: on the H200 a 4.8 us kernel's replays took 4.6 to 5.5 us depending on where
# its tensors lay (docs/benchmark.md), so one copy per worker made a run's median hang on one
# placement. (A per-process offset remains, with or without an L2 flush: bot.timing times each
# contender in more than one worker for that.) As many copies as fit in GRAPH_SETS_BYTES, at
# most GRAPH_SETS_MAX.
GRAPH_SETS_MAX = 32
GRAPH_SETS_BYTES = 64 << 20


def _flush_l2(words: torch.Tensor) -> torch.Tensor:
    """Read the whole flush buffer, so the L2 holds only its clean lines. Not a zeroing, as
    KernelBench and Triton's do_bench flush: that leaves the L2 full of dirty lines, whose
    write-back the next (timed) call pays as it reads; on the H200 it added 6.6 us (18 %) to
    matmul_bias_gelu's 117 MB decode layer (docs/benchmark.md, "Fourteenth session"). Bound at
    import like the timers, so a candidate that patches `Tensor.sum` or `zero_` cannot take
    the flush away from its own timings."""
    return _sum(words)


def _tids() -> set[str]:
    return set(_listdir("/proc/self/task"))


def _hash_tensor(t: torch.Tensor) -> str:
    flat = _contig(_reshape(_detach(t), -1))
    raw = _view(_to(flat, "cpu"), torch.uint8) if _numel(flat) else None
    h = _sha256(f"{t.dtype}{tuple(t.shape)}".encode())
    if raw is not None:
        h.update(raw.numpy().tobytes())
    return h.hexdigest()[:24]


def _import_file(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _as_outputs(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (tuple, list)) else [value]


def _meta(out: Any) -> dict[str, Any]:
    if type(out) is not _Tensor:  # exact type: subclasses (lazy tensors) are refused
        return {"type": type(out).__name__}
    return {"type": "Tensor", "dtype": str(out.dtype).removeprefix("torch."),
            "shape": list(out.shape), "device": out.device.type}


def _transfer_dtype(native: torch.dtype) -> torch.dtype | None:
    """Reference values travel in float64 for fp32/fp64 outputs, float32 for lower precision."""
    if not native.is_floating_point:
        return None
    return torch.float64 if native in (torch.float32, torch.float64) else torch.float32


class Harness:
    def __init__(self, channel: Channel, device: str, threads: int | None):
        self.ch = channel
        self.device = device
        self.problem = None
        self.cls = None
        self.precision = "native"
        self.model = None
        self.native_model = None
        self.get_inputs = None
        self.get_init_inputs = None
        self.roofline_flops = None
        self.flush_buf = None
        self.captured: _Rotation | None = None  # mode "graph": this shape's captured calls
        self.replays = 0  # mode "graph": which captured copy replays next
        self.gate: TuningGate | None = None  # set up by op_gate, for code that tunes by timing
        self.cycles_per_us: float | None = None
        self.weights: dict[tuple, torch.Tensor] = {}
        if threads:
            torch.set_num_threads(threads)
        self._warm_up()
        self.baseline_tids = _tids()

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
        if self.device == "cuda":
            torch.cuda.init()
            b = torch.randn(512, 512, device="cuda")
            (b @ b).sum().item()
            (b.to(torch.bfloat16) @ b.to(torch.bfloat16)).float().sum().item()
            _cuda_sync()

    def environment(self, describe: bool = True) -> dict[str, Any]:
        env: dict[str, Any] = {"device": self.device, "torch": torch.__version__,
                               "python": platform.python_version(), "host": platform.node(),
                               "cuda": torch.version.cuda, "driver": None, "clocks": {}}
        try:
            from importlib.metadata import version

            env["triton"] = version("triton")
        except Exception:
            env["triton"] = None
        if self.device == "cuda":
            env["device_name"] = torch.cuda.get_device_name()
            if describe:  # driver and clocks: only the worker whose environment is reported
                env.update(_nvidia_smi())
        else:
            env["device_name"] = _cpu_name()
        return env

    def timer_overhead_us(self) -> float:
        """Host-minus-event time of an empty timed region: the slack of the stream check."""
        if self.device != "cuda":
            return 0.0
        gaps = []
        for _ in range(30):
            e0, e1 = _Event(enable_timing=True), _Event(enable_timing=True)
            _cuda_sync()
            t0 = _perf_ns()
            _ev_record(e0)
            _ev_record(e1)
            _cuda_sync()
            host = (_perf_ns() - t0) / 1e3
            gaps.append(host - _ev_elapsed(e0, e1) * 1e3)
        gaps.sort()
        return gaps[len(gaps) // 2]

    # --- ops --------------------------------------------------------------------------
    def op_load(self, msg: dict) -> dict:
        try:
            self.problem = _import_file(msg["problem"], "kernel_bot_problem")
            for fn in ("get_inputs", "get_init_inputs"):
                if not callable(getattr(self.problem, fn, None)):
                    raise TypeError(f"the problem defines no function {fn}()")
            if not isinstance(getattr(self.problem, "Model", None), type):
                raise TypeError("the problem defines no class Model")
        except Exception as exc:
            return _failure("problem", exc)
        self.get_inputs = self.problem.get_inputs
        self.get_init_inputs = self.problem.get_init_inputs
        self.roofline_flops = getattr(self.problem, "roofline_flops", None)
        self.precision = msg.get("precision", "native")
        if msg.get("module") is None:
            self.cls = self.problem.Model
        else:
            try:
                sys.path.insert(0, os.path.dirname(msg["module"]))
                module = _import_file(msg["module"], "kernel_bot_candidate")
                self.cls = getattr(module, msg.get("class_name", "ModelNew"), None)
                if not isinstance(self.cls, type):
                    raise TypeError(f"the candidate defines no class {msg.get('class_name')}")
                if triton_interp.needed():
                    triton_interp.mend_bf16_dot()
            except BaseException as exc:  # SystemExit from a candidate is a failure too
                return _failure("import", exc)
        return {"ok": True, "new_threads": self._new_threads()}

    def op_construct(self, msg: dict) -> dict:
        try:
            for key, value in msg.get("overrides", {}).items():
                setattr(self.problem, key, value)
            init = self.get_init_inputs()
            if not isinstance(init, (list, tuple)):
                raise TypeError(f"get_init_inputs() returned {type(init).__name__}, expected a list")
        except Exception as exc:
            return _failure("problem", exc)
        seed = int(msg["seed"])
        try:
            with torch.no_grad():
                reference = None
                if self.cls is not self.problem.Model:
                    torch.manual_seed(seed)
                    reference = self.problem.Model(*init)
                torch.manual_seed(seed)
                model = self.cls(*init)
                if reference is not None:
                    _copy_matching_state(reference, model)
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
            return _failure("construct", exc)
        params = sum(p.numel() * p.element_size() for p in _module_tensors(self.native_model))
        return {"ok": True, "param_bytes": params, "new_threads": self._new_threads()}

    def _inputs(self, seed: int, distribution: str) -> list[Any]:
        _seed_cpu(seed)
        if self.device == "cuda":
            _seed_cuda(seed)
        with torch.device(self.device):
            inputs = self.get_inputs()
        if not isinstance(inputs, (list, tuple)):
            raise ProblemShapeError(f"get_inputs() returned {type(inputs).__name__}, expected a list")
        out = []
        for x in inputs:
            if _is_tensor(x):
                x = _to(x, self.device)
                if x.is_floating_point() and distribution != "standard":
                    x = x * 2.5 + 1.5 if distribution == "shifted" else x * 100.0
            out.append(x)
        return out

    def _upcast(self, inputs: list[Any]) -> list[Any]:
        if self.precision == "native":
            return inputs
        dtype = getattr(torch, self.precision)
        return [_to(x, dtype) if _is_tensor(x) and x.is_floating_point() else x for x in inputs]

    def op_run(self, msg: dict) -> dict:
        """One checked call: full outputs (or fingerprints) for the parent to compare."""
        try:
            inputs = self._inputs(int(msg["seed"]), msg["distribution"])
        except Exception as exc:
            return _failure("problem", exc)
        # Fingerprint requests (checks of timed calls) compare outputs only. Hashing the inputs
        # goes through host memory: for 2 GB of logits it cost seconds per timed batch.
        before = [] if msg.get("want") == "fingerprint" else [
            _hash_tensor(x) if _is_tensor(x) else repr(x) for x in inputs]
        if self.precision != "native":  # the reference: values from the upcast model
            return self._reference_run(inputs, before, msg)
        if self.device == "cuda":
            _poison_free_cuda_memory()
        gated = self.gate.gated_call() if msg.get("gate") and self.gate is not None else contextlib.nullcontext()
        try:
            with torch.no_grad():
                _cuda_sync() if self.device == "cuda" else None
                t0 = _perf_ns()
                with gated:
                    result = self.model(*inputs)
                _cuda_sync() if self.device == "cuda" else None
                host_us = (_perf_ns() - t0) / 1e3
        except BaseException as exc:
            return _failure("call", exc)
        outputs = _as_outputs(result)
        metas = [_meta(o) for o in outputs]
        after = [_hash_tensor(x) if _is_tensor(x) else repr(x) for x in inputs]
        reply: dict[str, Any] = {"ok": True, "meta": metas, "inputs_before": before,
                                 "inputs_after": after, "host_us": host_us,
                                 "new_threads": self._new_threads()}
        if all(m["type"] == "Tensor" for m in metas):
            if msg.get("want") == "fingerprint":
                reply["fingerprints"] = self._fingerprints(outputs, int(msg["fp_seed"]))
            else:
                reply["outputs"] = [_detach(o) for o in outputs]
        return reply

    def _reference_run(self, inputs: list[Any], before: list[str], msg: dict) -> dict:
        try:
            with torch.no_grad():
                native = _as_outputs(self.native_model(*inputs))
                exact = _as_outputs(self.model(*self._upcast(inputs)))
            metas = [_meta(o) for o in native]
            if any(m["type"] != "Tensor" for m in metas):
                raise TypeError(f"Model.forward returned {[m['type'] for m in metas]}, expected tensors")
            values = []
            for n, e in zip(native, exact):
                dtype = _transfer_dtype(n.dtype)
                values.append(_to(e, dtype) if dtype is not None else _to(e, n.dtype))
        except Exception as exc:
            return _failure("problem", exc)
        nbytes = sum(x.numel() * x.element_size() for x in inputs if _is_tensor(x))
        nbytes += sum(o.numel() * o.element_size() for o in native)
        nbytes += sum(p.numel() * p.element_size() for p in _module_tensors(self.native_model))
        flops = None
        if callable(self.roofline_flops):
            try:
                flops = int(self.roofline_flops(*inputs))
            except Exception as exc:
                return _failure("problem", exc)
        reply = {"ok": True, "meta": metas, "inputs_before": before, "bytes": nbytes,
                 "flops": flops, "input_meta": [
                     f"{str(x.dtype).removeprefix('torch.')}{list(x.shape)}" if _is_tensor(x)
                     else repr(x) for x in inputs]}
        if msg.get("want") == "fingerprint":
            reply["fingerprints"] = self._fingerprints(values, int(msg["fp_seed"]))
        else:
            reply["outputs"] = values
        return reply

    def op_gate(self, msg: dict) -> dict:
        """Hook the timing of kernel variants (bot.tuning_gate): in a call the bot marks as
        gated, the first such timing asks it for the GPU. Replies with what could be hooked."""
        if self.gate is None:
            self.gate = TuningGate(self.ch, _cuda_sync if self.device == "cuda" else lambda: None)
        return {"ok": True, "hooks": self.gate.install()}

    def op_release(self, msg: dict) -> dict:
        """Give the allocator's cached GPU memory back while this worker waits: workers of
        several candidates and problems share one GPU, and idle caches made them run out.
        The fingerprint vectors go too (float64, the outputs' size: 512 MB each for an
        8192x8192 output, up to four kept); they are drawn again from their seed on demand."""
        self.weights.clear()
        self.captured = None  # a CUDA graph's private memory pool goes with it
        if self.device == "cuda":
            _cuda_sync()
            torch.cuda.empty_cache()
        return {"ok": True}

    def op_fingerprints(self, msg: dict) -> dict:
        """Reference fingerprints for a list of seeds (checks calls made while timing)."""
        prints = []
        for seed in msg["seeds"]:
            reply = self.op_run({"seed": seed, "distribution": msg["distribution"],
                                 "want": "fingerprint", "fp_seed": msg["fp_seed"]})
            if not reply.get("ok"):
                return reply
            prints.append(reply["fingerprints"])
        return {"ok": True, "fingerprints": prints}

    def op_time(self, msg: dict) -> dict:
        """Timed calls, each on fresh inputs, L2 flushed before each on CUDA.

        Warm-up calls are made by the parent with this same op, so a candidate cannot tell
        warm-up from measurement. Every call's output is fingerprinted after its timed
        region so the parent can check any of them against the reference.

        On CUDA, mode "latency" synchronises the device before each call: a call's time is
        its host-side launch path and its GPU work back to back, as for one request on an
        idle GPU. Mode "throughput" times back-to-back calls with no synchronisation between
        them (inputs, L2 flush and fingerprints are enqueued on the stream): host work
        overlaps the GPU's, as in a pipelined loop, and counts only where it is the slower.
        Mode "graph" captures one call in a CUDA graph and times its replays: the GPU's time
        alone, as a serving engine that replays its decode step as a graph pays it.
        """
        cuda = self.device == "cuda"
        if cuda and self.flush_buf is None:
            # Here, not at start-up: a worker that is never timed (rejected in verification)
            # does not hold 256 MB of the GPU that other workers need.
            try:
                self.flush_buf = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
            except BaseException as exc:  # out of memory: reported, and retried alone
                return _failure("call", exc)
        if cuda and msg.get("mode") == "throughput":
            return self._time_back_to_back(msg)
        if cuda and msg.get("mode") == "graph":
            return self._time_graph_replays(msg)
        host, event, prints = [], [], []
        try:
            for seed in msg["seeds"]:
                inputs = self._inputs(int(seed), msg["distribution"])
                with torch.no_grad():
                    if cuda:
                        _flush_l2(self.flush_buf)
                        e0, e1 = _Event(enable_timing=True), _Event(enable_timing=True)
                        _cuda_sync()
                        t0 = _perf_ns()
                        _ev_record(e0)
                        result = self.model(*inputs)
                        _ev_record(e1)
                        _cuda_sync()  # device-wide: waits for work on every stream
                        host.append((_perf_ns() - t0) / 1e3)
                        event.append(_ev_elapsed(e0, e1) * 1e3)
                    else:
                        t0 = _perf_ns()
                        result = self.model(*inputs)
                        host.append((_perf_ns() - t0) / 1e3)
                outputs = _as_outputs(result)
                if (wrong := _not_tensors(outputs)) is not None:
                    return wrong
                prints.append(self._fingerprints(outputs, int(msg["fp_seed"])))
                del result, outputs, inputs
        except BaseException as exc:
            return _failure("call", exc)
        return {"ok": True, "host_us": host, "event_us": event if cuda else None,
                "fingerprints": prints, "new_threads": self._new_threads()}

    def _time_back_to_back(self, msg: dict) -> dict:
        """Mode "throughput" (see op_time). The stream check moves to the whole batch: the
        device-synchronised wall time of the batch against its event span on this stream."""
        def call(inputs: list[Any]) -> tuple | dict:
            with torch.no_grad():
                _flush_l2(self.flush_buf)
                e0, e1 = _Event(enable_timing=True), _Event(enable_timing=True)
                h0 = _perf_ns()
                _ev_record(e0)
                result = self.model(*inputs)
                _ev_record(e1)
                enqueue_us = (_perf_ns() - h0) / 1e3
            outputs = _as_outputs(result)
            if (wrong := _not_tensors(outputs)) is not None:
                return wrong
            return (e0, e1), outputs, enqueue_us

        reply = self._enqueued_batch(msg, call)
        if reply["ok"]:
            # A call costs at least the host's time to issue it: where the GPU was still busy with
            # earlier work when the call began, its event span shows only its GPU time and would
            # hide a slow launch path (on the H200 that made one kernel's launch-bound time move 2x).
            reply["samples_us"] = [max(e, h) for e, h in zip(reply["event_us"], reply.pop("enqueue_us"))]
        return reply

    def _time_graph_replays(self, msg: dict) -> dict:
        """Mode "graph" (see op_time). Each call's fresh inputs are copied into the captured
        call's input tensors, the L2 flushed, and the replay timed by events. A spin kernel
        queued before each replay keeps the GPU busy while the host records and launches, so
        the host's launch path never lands between the events. Only GPU work captured in the
        graph is replayed: a candidate that computed on the host or on a stream outside the
        capture returns stale outputs on fresh inputs, which the fingerprints expose."""
        try:
            rotation = self._capture(self._inputs(int(msg["seeds"][0]), msg["distribution"]))
        except BaseException as exc:
            failure = _failure("call", exc)
            failure["error"] = "CUDA graph capture for --timing graph failed: " + failure["error"]
            return failure
        try:
            cycles_per_us = self._gpu_cycles_per_us()
        except BaseException as exc:
            return _failure("call", exc)
        cover_us = 50.0  # the host's time to record and launch, measured below, doubled

        def replay(inputs: list[Any]) -> tuple:
            nonlocal cover_us
            captured = rotation.sets[self.replays % len(rotation.sets)]
            self.replays += 1
            for static, fresh in zip(captured.inputs, inputs):
                if _is_tensor(static):
                    _copy_(static, fresh)
            _flush_l2(self.flush_buf)
            _gpu_sleep(int(cover_us * cycles_per_us))
            e0, e1 = _Event(enable_timing=True), _Event(enable_timing=True)
            h0 = _perf_ns()
            _ev_record(e0)
            _graph_replay(captured.graph)
            _ev_record(e1)
            enqueue_us = (_perf_ns() - h0) / 1e3
            cover_us = min(max(cover_us, 2 * enqueue_us), 5000.0)
            return (e0, e1), captured.outputs, enqueue_us

        reply = self._enqueued_batch(msg, replay)
        if reply["ok"]:
            del reply["enqueue_us"]
            reply["samples_us"] = reply["event_us"]
            reply["graph_copies"] = len(rotation.sets)
        return reply

    def _enqueued_batch(self, msg: dict, enqueue: Callable[[list[Any]], tuple | dict]) -> dict:
        """What both unsynchronised modes share: per seed, `enqueue(inputs)` puts one call on
        the stream between its own events and returns (events, outputs, host µs to enqueue),
        or a failure reply; fingerprints stay on the device; one device-wide synchronise ends
        the batch, whose host time and event span make the stream check's one pair."""
        event_pairs, print_tensors, enqueue_us = [], [], []
        try:
            begin, end = _Event(enable_timing=True), _Event(enable_timing=True)
            _cuda_sync()
            t0 = _perf_ns()
            _ev_record(begin)
            for seed in msg["seeds"]:
                inputs = self._inputs(int(seed), msg["distribution"])
                called = enqueue(inputs)
                if isinstance(called, dict):
                    return called
                pair, outputs, host_us = called
                print_tensors.append(self._fingerprint_tensors(outputs, int(msg["fp_seed"])))
                event_pairs.append(pair)
                enqueue_us.append(host_us)
                del inputs, outputs, called
            _ev_record(end)
            _cuda_sync()  # device-wide: waits for work on every stream
            batch_host = (_perf_ns() - t0) / 1e3
            event = [_ev_elapsed(e0, e1) * 1e3 for e0, e1 in event_pairs]
            batch_span = _ev_elapsed(begin, end) * 1e3
            prints = [[t.tolist() for t in call] for call in print_tensors]
        except BaseException as exc:
            return _failure("call", exc)
        return {"ok": True, "host_us": [batch_host], "event_us": event, "enqueue_us": enqueue_us,
                "batch_span_us": batch_span, "fingerprints": prints, "new_threads": self._new_threads()}

    def _capture(self, inputs: list[Any]) -> "_Rotation":
        """This input signature's call, captured once per copy of the rotation (see
        GRAPH_SETS_MAX); another signature replaces them, so one shape's graphs are held at
        a time. The first copy's footprint (its tensors, or the memory its capture reserved,
        whichever is larger) decides how many copies fit."""
        signature = tuple((tuple(x.shape), x.dtype) if _is_tensor(x) else repr(x) for x in inputs)
        if self.captured is not None and self.captured.signature == signature:
            return self.captured
        self.captured = None
        _cuda_sync()
        torch.cuda.empty_cache()
        reserved = _memory_reserved()
        first = self._capture_copy(inputs, warm_ups=3)
        footprint = max(_tensor_bytes([*first.inputs, *first.outputs]), _memory_reserved() - reserved, 1)
        copies = [first]
        while len(copies) < min(GRAPH_SETS_MAX, GRAPH_SETS_BYTES // footprint):
            copies.append(self._capture_copy(inputs, warm_ups=1))
        self.captured = _Rotation(signature, tuple(copies))
        return self.captured

    def _capture_copy(self, inputs: list[Any], warm_ups: int) -> "_Captured":
        """One capture on input tensors of its own (warm-up calls on a side stream first, as
        CUDA graph capture requires); its outputs live in the graph's own memory pool."""
        static = [_clone(x) if _is_tensor(x) else x for x in inputs]
        side = _Stream()
        side.wait_stream(_current_stream())
        with torch.no_grad(), _stream_ctx(side):
            for _ in range(warm_ups):
                self.model(*static)
        _current_stream().wait_stream(side)
        _cuda_sync()
        graph = _CUDAGraph()
        with torch.no_grad(), _graph_capture(graph):
            result = self.model(*static)
        outputs = _as_outputs(result)
        if (wrong := _not_tensors(outputs)) is not None:
            raise TypeError(wrong["error"])
        return _Captured(graph, static, outputs)

    def _gpu_cycles_per_us(self) -> float:
        """The spin kernel counts clock cycles; how many make a microsecond, measured once."""
        if self.cycles_per_us is None:
            e0, e1 = _Event(enable_timing=True), _Event(enable_timing=True)
            _ev_record(e0)
            _gpu_sleep(2_000_000)
            _ev_record(e1)
            _cuda_sync()
            self.cycles_per_us = 2_000_000 / max(_ev_elapsed(e0, e1) * 1e3, 1.0)
        return self.cycles_per_us

    # --- helpers ----------------------------------------------------------------------
    def _fingerprints(self, outputs: list[torch.Tensor], fp_seed: int) -> list[list[float]]:
        """Per output: (projection on a secret random vector, 2-norm, non-finite count)."""
        return [t.tolist() for t in self._fingerprint_tensors(outputs, fp_seed)]

    def _fingerprint_tensors(self, outputs: list[torch.Tensor], fp_seed: int) -> list[torch.Tensor]:
        """The same, as float64 tensors on the outputs' device: no host synchronisation, so
        back-to-back timed calls stay back to back."""
        result = []
        for i, out in enumerate(outputs):
            x = _to(_detach(out), torch.float64)
            finite = torch.isfinite(x)
            nonfinite = (~finite).sum()
            x = torch.where(finite, x, torch.zeros((), dtype=x.dtype, device=x.device))
            key = (i, tuple(x.shape), x.device.type, fp_seed)
            w = self.weights.get(key)
            if w is None:
                gen = torch.Generator(device=x.device)
                gen.manual_seed(fp_seed + i)
                w = torch.randn(x.shape, generator=gen, dtype=torch.float64, device=x.device)
                if len(self.weights) >= 4:  # a few output sizes at a time: bounded memory
                    self.weights.clear()
                self.weights[key] = w
            result.append(torch.stack([(x * w).sum(), x.norm(), _to(nonfinite, torch.float64)]))
        return result

    def _new_threads(self) -> list[str]:
        extra = _tids() - self.baseline_tids
        names = sorted(t.name for t in _threads() if t is not threading.main_thread())
        return sorted(extra) + [f"python:{n}" for n in names]


class ProblemShapeError(Exception):
    pass


@dataclass(frozen=True)
class _Captured:
    graph: Any  # torch.cuda.CUDAGraph
    inputs: list[Any]  # the tensors the graph reads: each call's inputs are copied in
    outputs: list[torch.Tensor]  # the tensors the graph writes


@dataclass(frozen=True)
class _Rotation:
    signature: tuple  # the input shapes and dtypes these copies were captured for
    sets: tuple[_Captured, ...]  # replayed in turn


def _tensor_bytes(values: list[Any]) -> int:
    return sum(_numel(x) * x.element_size() for x in values if _is_tensor(x))


def _memory_reserved() -> int:
    return _cuda_reserved() if _cuda_available() else 0


def _module_tensors(model: Any) -> list[torch.Tensor]:
    if not isinstance(model, torch.nn.Module):
        return []
    return list(model.parameters()) + list(model.buffers())


def _copy_matching_state(reference: torch.nn.Module, model: Any) -> None:
    """Give ModelNew the reference's parameters wherever names and shapes match."""
    if not isinstance(model, torch.nn.Module) or not isinstance(reference, torch.nn.Module):
        return
    ref_state = reference.state_dict()
    for name, value in model.state_dict().items():
        src = ref_state.get(name)
        if src is not None and src.shape == value.shape:
            value.copy_(src)


def _poison_free_cuda_memory() -> None:
    """Fill the caching allocator's free blocks with 0xFF (NaN in every float format),
    so an output that is `torch.empty` reusing freed memory cannot look correct."""
    _cuda_sync()
    sizes = [b["size"] for seg in torch.cuda.memory_snapshot() for b in seg["blocks"]
             if b["state"] == "inactive"]
    held = []
    for size in sorted(sizes, reverse=True):
        try:
            t = torch.empty(size, dtype=torch.uint8, device="cuda")
        except RuntimeError:
            break
        t.fill_(0xFF)
        held.append(t)
    _cuda_sync()
    del held


def _not_tensors(outputs: list[Any]) -> dict | None:
    """The failure reply for a timed call whose outputs are not exactly torch.Tensor."""
    if all(type(o) is _Tensor for o in outputs):
        return None
    return {"ok": False, "phase": "call", "error": f"output type {[type(o).__name__ for o in outputs]}"}


def _failure(phase: str, exc: BaseException) -> dict:
    tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
    return {"ok": False, "phase": phase, "error": f"{type(exc).__name__}: {exc}"[:4000],
            "traceback": "".join(tb)[-6000:]}


def _nvidia_smi() -> dict[str, Any]:
    query = "driver_version,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,temperature.gpu,power.draw"
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits",
                              f"--id={torch.cuda.current_device()}"],
                             capture_output=True, text=True, timeout=20).stdout.strip()
        vals = [v.strip() for v in out.splitlines()[0].split(",")]
        names = query.split(",")[1:]
        return {"driver": vals[0], "clocks": dict(zip(names, vals[1:]))}
    except Exception:
        return {}


def _cpu_name() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


def _connect(address: str) -> socket.socket:
    kind, _, where = address.partition(":")
    if kind == "fd":
        return socket.socket(fileno=int(where))
    if kind == "unix":
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(where)
        return sock
    raise ValueError(f"unknown channel {address!r}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bot-worker")
    parser.add_argument("--channel", required=True)
    args = parser.parse_args(argv)
    channel = Channel(_connect(args.channel))
    hello = channel.recv()  # the only unsigned frame: it carries the run key
    channel.key = bytes.fromhex(hello["key"])
    harness = Harness(channel, hello["device"], hello.get("threads"))
    # Sent before any candidate code exists here: the parent's count of this process's threads
    # starts from it (bot.workers, WorkerClient.request).
    channel.send({"ok": True, "env": harness.environment(bool(hello.get("describe", True))),
                  "overhead_us": harness.timer_overhead_us(), "threads": len(harness.baseline_tids)})
    ops = {"load": harness.op_load, "construct": harness.op_construct, "run": harness.op_run,
           "time": harness.op_time, "fingerprints": harness.op_fingerprints,
           "release": harness.op_release, "gate": harness.op_gate}
    while True:
        try:
            msg = channel.recv()
        except ChannelClosed:
            return
        if msg.get("op") == "exit":
            return
        handler = ops.get(msg.get("op", ""))
        reply = handler(msg) if handler else {"ok": False, "phase": "protocol",
                                              "error": f"unknown op {msg.get('op')!r}"}
        channel.send(reply)


if __name__ == "__main__":
    main()
