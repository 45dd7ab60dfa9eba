"""The typed protocol between the bot and its workers: every message survives the wire, and a
malformed reply (the worker is the candidate's process) is refused with a message that names
the field, never with a KeyError or TypeError."""

from __future__ import annotations

import pytest
import torch

from bot.protocol import batches as b
from bot.protocol import dispatch as d
from bot.protocol import messages as m
from bot.protocol import typed as t
from bot.protocol.channel import decode, encode

META = [{"type": "Tensor", "dtype": "float32", "shape": [2, 3], "device": "cpu"}]
OUT = torch.arange(6, dtype=torch.float32).reshape(2, 3)

REQUESTS = [
    m.Hello(key="ab" * 32, device="cpu", threads=1, describe=False),
    m.Exit(),
    m.Load(problem="/p.py", module="/c.py", class_name="ModelNew", precision="float64"),
    m.Load(problem="/p.py"),
    m.Construct(seed=3, overrides={"N": 4}),
    m.Run(seed=1, gate=True),
    m.Run(seed=1, want="both", fp_seed=9),
    m.Fingerprints(seeds=[1, 2], fp_seed=9, want="outputs"),
    b.Stage(seeds=[1, 2], stub=True, meta=META, expose=False),
    b.StageInto(layout=[[{"tensor": ["float32", [2, 3]]}, {"value": 3, "tuple": False}]]),
    b.Time(fp_seed=5, mode="throughput", stub=False),
    b.Outputs(picks=[0, 2]),
    b.Quiet(chunks=30, chunk_us=100.0),
    m.Gate(),
    m.Release(),
]


@pytest.mark.parametrize("request_", REQUESTS, ids=lambda r: type(r).__name__)
def test_every_request_survives_the_channel(request_):
    wire = decode(encode(request_.to_wire()))
    assert wire["op"] == request_.op
    assert d.parse_request(wire) == request_


REPLIES = [
    (m.Load(problem="/p.py"), m.LoadReply(new_threads=["python:x"])),
    (m.Construct(seed=1), m.ConstructReply(param_bytes=24, new_threads=[])),
    (
        m.Run(seed=1),
        m.RunReply(meta=META, inputs_before=["a"], inputs_after=["a"], host_us=3.5, new_threads=[], outputs=[OUT]),
    ),
    (
        m.ReferenceRun(seed=1),
        m.RunReply(meta=META, inputs_before=["a"], outputs=[OUT], bytes=48, flops=None, input_meta=["float32[2, 3]"]),
    ),
    (
        m.Fingerprints(seeds=[1], fp_seed=2),
        m.FingerprintsReply(fingerprints=[[[1.0, 2.0, 0.0]]], outputs=[[OUT]]),
    ),
    (
        b.Stage(seeds=[1], expose=True),
        b.StageReply(layout=[[{"tensor": ["float32", [2, 3]]}]], regions=[[[4096, 24]]]),
    ),
    (b.StageInto(layout=[[{"tensor": ["float32", [2, 3]]}]]), b.StageReply(regions=[[[8192, 24]]])),
    (
        b.Time(fp_seed=1, calls=2),
        b.TimeReply(host_us=[1.0, 2.0], event_us=None, fingerprints=[["d1"], ["d2"]], new_threads=[]),
    ),
    (
        b.Time(fp_seed=1, mode="throughput", calls=2),
        b.TimeReply(
            host_us=[9.0],
            event_us=[3.0, 4.0],
            fingerprints=[[[1.0, 2.0, 0.0]]] * 2,
            new_threads=[],
            batch_span_us=8.0,
            samples_us=[3.0, 4.0],
        ),
    ),
    (b.Outputs(picks=[1]), b.OutputsReply(outputs=[[OUT]])),
    (b.Quiet(chunks=2, chunk_us=100.0), b.QuietReply(wall_us=250.0, intervals_us=[100.0, 101.0])),
    (m.Gate(), m.GateReply(hooks=["triton Autotuner._bench"])),
    (m.Release(), t.Done()),
]


@pytest.mark.parametrize("request_,reply", REPLIES, ids=lambda r: type(r).__name__)
def test_every_reply_survives_the_channel(request_, reply):
    wire = decode(encode(reply.to_wire()))
    assert wire["ok"] is True
    parsed = request_.parse_reply(wire)
    assert type(parsed) is type(reply)
    for name, value in vars(reply).items():
        got = getattr(parsed, name)
        if (
            isinstance(value, list)
            and value
            and isinstance(value[0], list)
            and value[0]
            and isinstance(value[0][0], torch.Tensor)
        ):
            assert all(torch.equal(a, b) for x, y in zip(value, got) for a, b in zip(x, y))
        elif isinstance(value, list) and value and isinstance(value[0], torch.Tensor):
            assert all(torch.equal(a, b) for a, b in zip(value, got))
        else:
            assert got == value, name


def test_the_time_reply_samples_are_the_parents_per_call_times():
    cpu = b.TimeReply(host_us=[1.0, 2.0], event_us=None, fingerprints=[], new_threads=[])
    cuda = b.TimeReply(host_us=[1.5, 2.5], event_us=[1.0, 2.0], fingerprints=[], new_threads=[])
    b2b = b.TimeReply(
        host_us=[9.0], event_us=[3.0, 1.0], fingerprints=[], new_threads=[], batch_span_us=8.0, samples_us=[3.0, 4.0]
    )
    assert (cpu.samples, cuda.samples, b2b.samples) == ([1.0, 2.0], [1.0, 2.0], [3.0, 4.0])


TIME = b.Time(fp_seed=1, calls=2)
GOOD_TIME = {"ok": True, "host_us": [1.0, 2.0], "event_us": None, "fingerprints": [["d"], ["d"]], "new_threads": []}


@pytest.mark.parametrize(
    "change,says",
    [
        ({"fingerprints": None}, "missing field 'fingerprints'"),
        ({"host_us": "fast"}, "TimeReply.host_us: expected a list"),
        ({"host_us": [1.0, "2"]}, "TimeReply.host_us[1]: expected a number"),
        ({"host_us": [1.0, True]}, "TimeReply.host_us[1]: expected a number"),
        ({"new_threads": "none"}, "TimeReply.new_threads: expected a list"),
        ({"fingerprints": [["d"]]}, "fingerprints: expected 2 entries, got 1"),
        ({"fingerprints": [["d"], [[1.0, 2.0]]]}, "a digest or a fingerprint of 3 numbers"),
        ({"host_us": [1.0]}, "samples: expected 2 entries, got 1"),
        ({"host_us": [1.0, float("nan")]}, "TimeReply.host_us[1]: expected a finite number"),
        ({"host_us": [1.0, -5.0]}, "TimeReply.host_us[1]: expected a time of 0 or more"),
        ({"fingerprints": [["d"], [[float("nan"), 1.0, 0.0]]]}, "fingerprints[1][0][0]: expected a finite number"),
        ({"event_us": [1.0]}, "samples: expected 2 entries, got 1"),
    ],
)
def test_a_malformed_time_reply_is_refused_naming_the_field(change, says):
    wire = {k: v for k, v in {**GOOD_TIME, **change}.items() if v is not None or k == "event_us"}
    with pytest.raises(t.ProtocolError, match="malformed reply to op 'time'") as caught:
        TIME.parse_reply(wire)
    assert says in str(caught.value)


@pytest.mark.parametrize(
    "request_,wire,says",
    [
        (b.Outputs(picks=[0, 1]), {"ok": True, "outputs": [[OUT]]}, "outputs: expected 2 entries, got 1"),
        (b.Outputs(picks=[0]), {"ok": True, "outputs": [["not a tensor"]]}, "outputs[0][0]: expected a tensor"),
        (b.Outputs(picks=[0]), {"ok": True, "outputs": {"0": [OUT]}}, "OutputsReply.outputs: expected a list"),
        (b.Quiet(chunks=3, chunk_us=1.0), {"ok": True, "wall_us": 5.0, "intervals_us": [1.0]}, "expected 3 entries"),
        (
            b.Quiet(chunks=1, chunk_us=1.0),
            {"ok": True, "wall_us": float("nan"), "intervals_us": [1.0]},
            "a finite number",
        ),
        (m.Construct(seed=1), {"ok": True, "new_threads": []}, "missing field 'param_bytes'"),
        (m.Construct(seed=1), {"ok": True, "param_bytes": 1.5, "new_threads": []}, "expected an integer"),
        (
            m.Run(seed=1),
            {"ok": True, "meta": META, "inputs_before": [], "inputs_after": [], "new_threads": []},
            "outputs: expected 1 entries, got none",
        ),
        (
            m.Run(seed=1),
            {
                "ok": True,
                "meta": [{"type": "Tensor", "dtype": "float32", "shape": "big", "device": "cpu"}],
                "inputs_before": [],
                "outputs": [OUT],
            },
            "RunReply.meta[0].shape: expected a list",
        ),
        (
            m.Run(seed=1),
            {"ok": True, "meta": META, "inputs_before": [], "outputs": [OUT], "new_threads": []},
            "missing field 'inputs_after'",
        ),
        (
            m.ReferenceRun(seed=1),
            {"ok": True, "meta": META, "inputs_before": [], "outputs": [OUT], "input_meta": []},
            "missing field 'bytes'",
        ),
        (
            m.Run(seed=1, gate=True),
            {"ok": True, "meta": META, "inputs_before": [], "inputs_after": [], "new_threads": [], "outputs": [OUT]}
            | {"tuning": [1.0, 2.0]},
            "tuning: three figures",
        ),
        (
            m.Run(seed=1, gate=True),
            {"ok": True, "meta": META, "inputs_before": [], "inputs_after": [], "new_threads": [], "outputs": [OUT]}
            | {"tuning": [1.0, float("inf"), 3.0]},
            "a finite number",
        ),
        (
            m.Fingerprints(seeds=[1, 2], fp_seed=1),
            {"ok": True, "fingerprints": [None, None], "outputs": [[OUT], [OUT]]},
            "fingerprints: one is missing",
        ),
        (b.StageInto(layout=[[], []]), {"ok": True, "regions": [[[1, 2, 3]]]}, "[address, bytes]"),
        (b.StageInto(layout=[[], []]), {"ok": True}, "regions: expected 2 entries, got none"),
        (m.Gate(), {"ok": True, "hooks": [1]}, "GateReply.hooks[0]: expected a string"),
        (m.Gate(), ["ok"], "GateReply: expected an object, got list"),
    ],
)
def test_malformed_replies_are_refused_naming_the_field(request_, wire, says):
    with pytest.raises(t.ProtocolError) as caught:
        request_.parse_reply(wire)
    assert says in str(caught.value) and f"op {request_.op!r}" in str(caught.value)


@pytest.mark.parametrize(
    "wire,says",
    [
        ({"op": "time"}, "Time: missing field 'fp_seed'"),
        ({"op": "time", "fp_seed": 1, "mode": "fastest"}, "Time.mode: expected 'latency' or 'throughput' or 'graph'"),
        ({"op": "run", "seed": "1"}, "Run.seed: expected an integer"),
        ({"op": "run", "seed": 1, "want": "both"}, "needs fp_seed"),
        ({"op": "stage", "seeds": [1], "stub": True}, "a stub needs meta"),
        ({"op": "outputs", "picks": ["0"]}, "Outputs.picks[0]: expected an integer"),
        ({"op": "launch"}, "unknown op 'launch'"),
        ({"seeds": []}, "unknown op None"),
    ],
)
def test_malformed_requests_are_refused_naming_the_field(wire, says):
    with pytest.raises(t.ProtocolError) as caught:
        d.parse_request(wire)
    assert says in str(caught.value)


def test_a_failure_reply_round_trips():
    failure = t.Failure(phase="call", error="RuntimeError: boom", traceback="tb")
    assert failure.to_wire() == {"ok": False, "phase": "call", "error": "RuntimeError: boom", "traceback": "tb"}
    assert t.Failure.from_wire(failure.to_wire()) == failure
    with pytest.raises(t.ProtocolError, match="Failure.phase: expected a string"):
        t.Failure.from_wire({"ok": False, "phase": 3, "error": "x"})


def test_messages_are_frozen_and_hold_tensors_without_copying():
    reply = b.OutputsReply(outputs=[[OUT]])
    assert b.Outputs(picks=[0]).parse_reply(reply.to_wire()).outputs[0][0] is OUT
    with pytest.raises(AttributeError):
        reply.outputs = []  # type: ignore[misc]


def test_the_tuning_gates_exchange_is_typed_too():
    assert m.GateAsk("want").to_wire() == {"gate": "want"}
    assert m.GateAnswer.from_wire(m.GateAnswer(m.GateAnswer.GRANTED).to_wire()).gate == "granted"
    with pytest.raises(t.ProtocolError, match="GateAsk.gate: expected a string"):
        m.GateAsk.from_wire({"gate": {"want": True}})


def test_a_tensor_hashed_in_chunks_has_the_digest_of_its_whole_bytes(monkeypatch):
    # The digest a timed call commits to on the CPU is checked by the parent against the bytes it
    # reads from outside (measures.digest): hashing in chunks must not change it.
    from bot.protocol import measures

    cases = [
        torch.randn(37, 129),
        torch.randn(64, 32).t(),  # not contiguous: its values in row-major order
        torch.arange(1000) % 3 == 0,
        torch.randn(5, 7, dtype=torch.float64).to(torch.bfloat16),
        torch.tensor(2.5),
        torch.empty(0, 4),
    ]
    whole = [
        measures.digest(t.dtype, tuple(t.shape), t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
        for t in cases
    ]
    for chunk in (1, 7, 4096, 1 << 30):
        monkeypatch.setattr(measures, "HASH_CHUNK_BYTES", chunk)
        assert [measures.hash_tensor(t) for t in cases] == whole, chunk
    assert measures.hash_tensor(cases[0]) != measures.hash_tensor(cases[0] + 1e-6)


def test_a_gpu_tensors_summed_digest_sees_any_byte_changed_or_moved(monkeypatch):
    # On a GPU a tensor's digest is summed where it lies (SHA-256 through the host took seconds
    # for KernelBench's 6 GiB inputs); exact integer sums, so it is checked here on the CPU.
    from bot.protocol import measures

    monkeypatch.setattr(measures, "SUM_CHUNK_BYTES", 64)
    x = torch.randn(40, 33)  # 5280 bytes: 83 chunks, the last one short
    base = measures.summed_digest(x)
    assert measures.summed_digest(x.clone()) == base
    assert measures.summed_digest(x.t().contiguous().t()) == base  # values, not layout
    flipped = x.clone()
    flipped.view(torch.uint8).view(-1)[1234] ^= 1  # one bit
    swapped = x.clone()
    swapped[3, 4], swapped[3, 5] = x[3, 5], x[3, 4]  # two values within a chunk
    chunks = x.clone().view(-1)
    chunks[:16], chunks[16:32] = x.view(-1)[16:32].clone(), x.view(-1)[:16].clone()  # two whole chunks
    for changed in (flipped, swapped, chunks.view(40, 33), x.view(33, 40), x.view(torch.int32)):
        assert measures.summed_digest(changed) != base
    monkeypatch.setattr(measures, "SUM_CHUNK_BYTES", 4 << 20)
    assert measures.summed_digest(x) != base  # the chunking is part of the digest: one size, everywhere
    assert measures.hash_tensor(x) != measures.summed_digest(x)  # the CPU keeps SHA-256 of the bytes
