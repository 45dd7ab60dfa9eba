"""Outputs compared where they lie: the reference keeps a trial's outputs, lends each contender's
call fresh poisoned blocks (file descriptors over the channel) and judges what was written there
(bot.harness.judge). On a CPU the blocks are sealed memfds; the same protocol carries CUDA VMM
allocations on a GPU (tests/test_gpu_lent.py)."""

from __future__ import annotations

import contextlib
import errno
import os
import socket
from pathlib import Path

import pytest
import torch
from conftest import CANDIDATES, PROBLEMS

from bot.harness.blocks import POISON, borrow, lend
from bot.protocol.channel import Channel

KEY = b"k" * 32


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _pair(receiver_room: int) -> tuple[Channel, Channel]:
    a, b = socket.socketpair()
    sender, receiver = Channel(a, KEY), Channel(b, KEY)
    receiver.fd_room = receiver_room
    return sender, receiver


def test_descriptors_travel_with_a_message_to_an_end_that_takes_them():
    sender, receiver = _pair(4)
    block, fd = lend(64, "cpu")
    sender.send({"op": "x", "t": torch.arange(3)}, fds=[fd])
    os.close(fd)
    message = receiver.recv()
    (got,) = receiver.take_fds()
    assert message["op"] == "x" and message["t"].tolist() == [0, 1, 2]
    theirs = borrow(got, 64, "cpu")  # the same memory: a write there shows here
    os.close(got)  # the mapping does not need it
    theirs.view(torch.float32, [16]).fill_(2.0)
    assert block.view(torch.float32, [16]).eq(2.0).all()
    assert receiver.take_fds() == []


def test_an_end_without_room_takes_no_descriptor_and_the_message_still_arrives():
    # The bot's channels to contenders: whatever a candidate attaches is closed by the kernel.
    sender, receiver = _pair(0)
    _, fd = lend(64, "cpu")
    before = _open_fds()
    sender.send({"op": "y"}, fds=[fd, fd, fd])
    os.close(fd)
    assert receiver.recv() == {"op": "y"}
    assert receiver.take_fds() == [] and _open_fds() == before - 1


def test_too_many_descriptors_are_tampering():
    from bot.protocol.channel import ChannelTampered

    sender, receiver = _pair(1)
    _, fd = lend(8, "cpu")
    sender.send({"op": "z"}, fds=[fd, fd])
    with pytest.raises(ChannelTampered, match="descriptors"):
        receiver.recv()
    for got in receiver.take_fds():
        os.close(got)
    os.close(fd)


def test_a_lent_block_is_poisoned_and_cannot_be_shrunk_under_the_reference():
    block, fd = lend(4096, "cpu")
    assert block.view(torch.uint8, [4096]).eq(POISON).all()
    assert torch.isnan(block.view(torch.float32, [1024])).all()
    with pytest.raises(OSError) as raised:  # a contender truncating it would SIGBUS the reference
        os.ftruncate(fd, 0)
    assert raised.value.errno == errno.EPERM
    with pytest.raises(ValueError, match="takes"):
        block.view(torch.float64, [1024])
    os.close(fd)


# Every cheat of the regression suite that a trial rejects, with its outputs judged in the
# reference, and the cheat aimed at the lending itself.
REJECTED = {
    "cheat_empty": "values",
    "cheat_mutate_input": "inputs unchanged",
    "cheat_subclass": "output structure",
    "cheat_low_precision": "values",
    "cheat_zero_shortcut": "values",
    "cheat_patch_checks": "values",
    "cheat_patch_reference": "values",
    "cheat_gc_scan": "values",
    "cheat_background_thread": "no new threads",
    "cheat_skip_lent_write": "values",
}
ACCEPTED = ["honest", "honest_fresh_outputs"]


def judged_in_the_reference(problem: str, names: list[str], options) -> tuple[dict, list[str]]:
    """Evaluate `names` on `problem` with every shape's outputs lent (LEND_OVER_BYTES 0): the
    outcomes by name and the run's notes."""
    import bot.engine.verification.trials as trials
    from bot.core.progress import Note
    from bot.engine.evaluation.evaluate import evaluate
    from bot.engine.workspace.candidates import load_candidate
    from bot.engine.workspace.problems import load_problem

    notes: list[str] = []
    saved, trials.LEND_OVER_BYTES = trials.LEND_OVER_BYTES, 0
    try:
        result = evaluate(
            load_problem(PROBLEMS / problem),
            [load_candidate(CANDIDATES / f"{n}.py") for n in names],
            None,
            options,
            lambda event: notes.append(event.text) if isinstance(event, Note) else None,
        )
    finally:
        trials.LEND_OVER_BYTES = saved
    return {o.candidate.name: o for o in result.candidates}, notes


@pytest.fixture(scope="module")
def lent_outcomes():
    from bot.engine.evaluation.options import EvalOptions
    from bot.engine.timing.records import TimingOptions
    from bot.sandbox import Limits

    options = EvalOptions(
        device="cpu",
        use_cache=False,
        limits=Limits(memory_mb=4096, call_timeout_s=20),
        timing=TimingOptions(time_cap_s=0.3, min_samples=5),
    )
    return judged_in_the_reference("scale_add.py", [*REJECTED, *ACCEPTED], options)


def test_every_shape_was_compared_in_the_reference(lent_outcomes):
    _, notes = lent_outcomes
    assert sum("outputs compared in the reference, where they lie" in n for n in notes) == 2, notes
    assert not [n for n in notes if "could not lend" in n]


@pytest.mark.parametrize("name,check", sorted(REJECTED.items()))
def test_a_cheat_judged_in_the_reference_is_rejected_by_the_named_check(lent_outcomes, name, check):
    verdict = lent_outcomes[0][name].verdict
    failed = [c.name for c in verdict.checks if not c.passed]
    assert not verdict.accepted and check in failed, verdict.reasons


@pytest.mark.parametrize("name", ACCEPTED)
def test_honest_code_judged_in_the_reference_is_accepted_with_its_errors(lent_outcomes, name):
    outcome = lent_outcomes[0][name]
    assert outcome.verdict.accepted, outcome.verdict.reasons
    values = [c for c in outcome.verdict.checks if c.name == "values"]
    assert values and all(c.passed and "norm_rel_err" in c.details for c in values)


def test_what_was_not_written_is_seen_as_poison(lent_outcomes):
    check = next(c for c in lent_outcomes[0]["cheat_skip_lent_write"].verdict.checks if not c.passed)
    assert "NaN" in check.evidence, check.evidence


def test_a_rule_travels_to_the_reference_as_it_is():
    import math

    from bot.core.tolerance import AllClose, Tolerance, rule_from_wire, rule_to_wire

    for rule in (Tolerance(1e-5, 1e-4, math.inf), AllClose(1e-4, 1e-4, 0.02), None):
        assert rule_from_wire(rule_to_wire(rule)) == rule
    with pytest.raises(ValueError, match="not a rule"):
        rule_from_wire({"norm_rel": 1.0})


def test_the_reference_refuses_to_judge_blocks_it_did_not_lend_or_with_nothing_kept():
    import bot.harness.worker as worker
    from bot.protocol.messages import Construct, Judge, Lend, Load

    h = worker.Harness(None, "cpu", 1)
    assert h.op_load(Load(problem=str(PROBLEMS / "scale_add.py"), precision="float64"))["ok"]
    assert h.op_construct(Construct(seed=3))["ok"]
    assert "no outputs kept" in h.op_lend(Lend())["error"]
    from bot.protocol.messages import Run

    assert h.op_run(Run(seed=5, want="outputs", send_up_to=-1))["kept"] is True
    lent = h.op_lend(Lend())
    outgoing = h.take_outgoing()
    for fd in outgoing:
        os.close(fd)
    assert lent["ok"] and len(outgoing) == len(lent["sizes"]) == 1
    assert "no blocks lent" in h.op_judge(Judge(token="elsewhere"))["error"]
    judged = h.op_judge(Judge(token=lent["token"], rules=[None], labels=["x"]))  # still poison
    assert judged["ok"] and judged["results"][0]["passed"] is False
    assert h.lent == {}


def test_a_token_keeps_its_outputs_when_the_reference_computes_the_next_call():
    """Blocks lent for a picked timed call stay bound to that call's outputs while the reference
    computes the next pick's (and `alone` frees the kept outputs with the blocks); a contender
    writes a picked call's outputs into them."""
    import os

    import bot.harness.worker as worker
    from bot.protocol.messages import Construct, Judge, Lend, Load, Run

    h = worker.Harness(None, "cpu", 1)
    assert h.op_load(Load(problem=str(PROBLEMS / "scale_add.py"), precision="float64"))["ok"]
    assert h.op_construct(Construct(seed=3))["ok"]
    tokens = {}
    for seed in (5, 6):
        reply = h.op_run(Run(seed=seed, want="fingerprint", fp_seed=1, send_up_to=-1))
        assert reply["kept"] is True and reply.get("outputs") is None and len(reply["fingerprints"]) == 1
        tokens[seed] = h.op_lend(Lend(alone=True))
        assert h.expected is None  # alone: held by the token only
    fds = h.take_outgoing()
    try:
        for seed, fd in zip((5, 6), fds):
            # The contender's answer for the call: the problem's own, in its float32.
            got = [t.float() for t in h.op_run(Run(seed=seed, want="outputs"))["outputs"]]
            assert worker.write_into("cpu", [fd], tokens[seed]["sizes"], got) is True
    finally:
        for fd in fds:
            os.close(fd)
    for seed in (6, 5):
        judged = h.op_judge(Judge(token=tokens[seed]["token"], rules=[None], labels=[f"seed {seed}"]))
        assert judged["ok"] and judged["results"][0]["passed"] is True, judged
    assert h.lent == {}


def test_no_room_to_lend_is_the_contenders_shortage_of_memory_not_the_problems(monkeypatch):
    """The reference cannot lend one contender's call its blocks (the GPU full beside the other
    contenders' calls: KernelBench's 19_ReLU, 6 GiB a block, on the H100): that contender ran
    out of GPU memory (on a GPU it runs again alone), the problem does not fail, the others pass."""
    from bot.engine.evaluation.options import EvalOptions
    from bot.engine.timing.records import TimingOptions
    from bot.engine.verification.expected import ExpectedOutputs
    from bot.engine.workers.client import WorkerFailure
    from bot.engine.workers.failures import ran_out_of_gpu_memory
    from bot.sandbox import Limits

    lend, calls = ExpectedOutputs.lend, []

    def short_once(self):
        calls.append(1)
        if len(calls) == 2:  # the first contender call's (the first is the reference's probe)
            raise WorkerFailure("problem", "VmmError: create: CUDA error 2 (CUDA out of memory)")
        return lend(self)

    monkeypatch.setattr(ExpectedOutputs, "lend", short_once)
    options = EvalOptions(
        device="cpu",
        use_cache=False,
        parallel=1,
        limits=Limits(memory_mb=4096, call_timeout_s=20),
        timing=TimingOptions(time_cap_s=0.3, min_samples=5),
        cache_root=Path("/tmp/kernel-bot-test-cache"),
    )
    outcomes, _ = judged_in_the_reference("scale_add.py", ["honest", "honest_fresh_outputs"], options)
    short = [o for o in outcomes.values() if ran_out_of_gpu_memory(o)]
    assert len(short) == 1 and "no room for its outputs" in short[0].verdict.reasons[0], short
    assert all(o.verdict.accepted for o in outcomes.values() if o not in short)


def test_a_cuda_lend_refused_for_memory_gives_the_allocators_cache_back_and_tries_once_more(monkeypatch):
    # The reference's caching allocator holds what its float64 temporaries freed, out of the
    # driver's reach; a block the driver refuses for want of memory is asked for again once that
    # cache is given back, and any other refusal is not retried.
    from types import SimpleNamespace

    from bot.harness import vmm

    monkeypatch.setattr(vmm, "_driver", lambda: SimpleNamespace(cuGetErrorString=lambda result, text: 0))
    with pytest.raises(vmm.VmmOutOfMemory, match="CUDA out of memory"):
        vmm._check(2, "create")
    with pytest.raises(vmm.VmmError) as refused:
        vmm._check(1, "map")
    assert not isinstance(refused.value, vmm.VmmOutOfMemory)

    calls: list[str] = []
    answers: list[Exception | None] = [vmm.VmmOutOfMemory("create: CUDA error 2 (CUDA out of memory)"), None]

    def create(nbytes):
        calls.append("create")
        failure = answers.pop(0)
        if failure is not None:
            raise failure
        return SimpleNamespace(size=nbytes), 7

    monkeypatch.setattr(vmm, "create", create)
    monkeypatch.setattr(vmm, "as_tensor", lambda mapping, nbytes: torch.zeros(nbytes, dtype=torch.uint8))
    monkeypatch.setattr(vmm, "close", lambda mapping: None)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("empty_cache"))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    block, fd = lend(64, "cuda")
    assert calls == ["create", "empty_cache", "create"] and fd == 7
    assert bool((block.data == POISON).all())

    calls.clear()
    answers[:] = [vmm.VmmError("create: CUDA error 1 (invalid argument)")]
    with pytest.raises(vmm.VmmError, match="invalid argument"):
        lend(64, "cuda")
    assert calls == ["create"]


def _blocks_held_here() -> list[str]:
    """The lent blocks this process still holds a descriptor of: each keeps its memory (on a
    GPU, a whole call's outputs) alive after the reference and the contender are gone."""
    held = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            if "kernel-bot-block" in (target := os.readlink(f"/proc/self/fd/{fd}")):
                held.append(target)
    return held


def test_the_bot_keeps_no_descriptor_of_a_block_once_its_evaluation_ends(lent_outcomes):
    # A descriptor left open keeps its block's memory, for the rest of the bot's run: on the
    # H100, 6 GiB for each of KernelBench's 19_ReLU calls it was lent for, until no problem fit.
    assert _blocks_held_here() == []


def test_blocks_lent_for_timed_picks_that_are_never_sent_leave_no_descriptor_here(monkeypatch):
    # The reference lends the first pick its block, then cannot lend the second: picks go on
    # checked by fingerprint alone, and the first block, never sent, is freed with no
    # descriptor of it left in the bot.
    from types import SimpleNamespace

    import bot.engine.timing.lent_picks as lent_picks
    from bot.engine.verification.expected import Lent
    from bot.engine.workers.client import WorkerFailure

    _, fd = lend(64, "cpu")
    lends = [Lent("t1", [64], [fd]), WorkerFailure("problem", "VmmError: create: CUDA error 2")]
    freed: list[str] = []

    def next_lend(reference, timeout_s, alone=False):
        answer = lends.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(lent_picks, "ask", lambda *a, **k: SimpleNamespace(fingerprints=[[1.0]]))
    monkeypatch.setattr(lent_picks, "lend", next_lend)
    monkeypatch.setattr(lent_picks, "judge", lambda reference, lent, wanted, t: freed.append(lent.token) or [])
    picking = lent_picks.PickLending(on=True)
    picks = picking.lend(None, [5, 6], fp_seed=1, timeout_s=1.0)
    assert [p.lent for p in picks] == [None, None] and not picking.on and "fingerprint alone" in picking.note
    assert freed == ["t1"]
    with pytest.raises(OSError):
        os.fstat(fd)


def test_on_a_gpu_trials_lend_from_the_size_at_which_timed_calls_do(monkeypatch):
    """KernelBench's 47_Conv3d_Mish_Tanh: a 472 MB float32 output, 945 MB of float64 reference a
    trial. On the H100 its outputs crossed the channel to be compared on the bot's CPU, 16 to
    35 s a trial; on a GPU the reference judges them in device memory instead. On a CPU, where
    the reference would compare on the same cores, they still travel below 1 GiB."""
    from bot.engine.timing.harness_cost import HarnessCost
    from bot.engine.verification import trials

    conv3d = 16 * 64 * 30 * 62 * 62 * 8  # float64 bytes of its output
    assert conv3d > trials.lend_over("cuda") and conv3d < trials.lend_over("cpu")
    # The float64 of the largest float32 output whose timed calls still travel whole.
    assert trials.lend_over("cuda") == 2 * HarnessCost.FULL_CHECK_BYTES
    # Tests that lend everything (LEND_OVER_BYTES 0) lend everything on either device.
    monkeypatch.setattr(trials, "LEND_OVER_BYTES", 0)
    assert trials.lend_over("cuda") == trials.lend_over("cpu") == 0
