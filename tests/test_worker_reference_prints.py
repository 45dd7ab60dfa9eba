"""The reference worker's fingerprints for timed calls: outputs only. Hashing the inputs (for
the unchanged-inputs check of full trials) goes through host memory, and on the H200 it cost
seconds per timed batch for large inputs."""

from __future__ import annotations

import contextlib

from conftest import PROBLEMS

import bot.harness.shared as shared
import bot.harness.worker as worker
from bot.core.distributions import DISTRIBUTIONS
from bot.protocol.dispatch import parse_request
from bot.protocol.messages import Construct, Fingerprints, Load, Release, Run


def _reference(monkeypatch, hashed: list[int]):
    real = shared.hash_tensor
    monkeypatch.setattr(shared, "hash_tensor", lambda t: hashed.append(t.numel()) or real(t))
    h = worker.Harness(None, "cpu", 1)
    assert h.op_load(Load(problem=str(PROBLEMS / "scale_add.py"), precision="float64"))["ok"]
    assert h.op_construct(Construct(seed=3))["ok"]
    return h


def test_fingerprints_of_timed_calls_do_not_hash_the_inputs(monkeypatch):
    hashed: list[int] = []
    h = _reference(monkeypatch, hashed)
    reply = h.op_fingerprints(Fingerprints(seeds=[5, 6], fp_seed=9))
    assert reply["ok"] and len(reply["fingerprints"]) == len(reply["outputs"]) == 2
    assert hashed == []
    # A full trial still records the inputs, so a candidate that changes them is caught.
    full = h.op_run(Run(seed=5))
    assert full["ok"] and hashed and len(full["inputs_before"]) == len(hashed)


def test_release_drops_the_fingerprint_vectors_and_they_come_back_the_same(monkeypatch):
    # On the H200 each worker held GiBs between phases; 56 of them filled the GPU.
    h = _reference(monkeypatch, [])
    before = h.op_fingerprints(Fingerprints(seeds=[5], fp_seed=9))["fingerprints"]
    assert h.weights
    assert h.op_release(Release())["ok"] and not h.weights
    after = h.op_fingerprints(Fingerprints(seeds=[5], fp_seed=9))["fingerprints"]
    assert after == before


def test_only_the_reference_worker_describes_the_machine(monkeypatch, quick_options):
    # nvidia-smi is a subprocess per worker; 29 workers started it at once on the H200.
    from conftest import CANDIDATES

    import bot.engine.workers.client as workers
    from bot.engine.evaluation.evaluate import evaluate
    from bot.engine.workspace.candidates import load_candidate
    from bot.engine.workspace.problems import load_problem

    hellos: list[tuple[str, bool]] = []
    real_init = workers.WorkerClient.__init__

    def spy(self, sandbox, label, *args, **kwargs):
        hellos.append((label, kwargs.get("describe", True)))
        real_init(self, sandbox, label, *args, **kwargs)

    monkeypatch.setattr(workers.WorkerClient, "__init__", spy)
    result = evaluate(
        load_problem(PROBLEMS / "scale_add.py"), [load_candidate(CANDIDATES / "honest.py")], None, quick_options()
    )
    assert result.environment.device_name  # still described, by the reference
    assert sorted(hellos) == sorted([("reference", True), ("c0", False)])


class _LoggedWorker:
    """A worker harness in this process that says it is on a GPU and logs the ops it gets
    (the cache release is the same op on CPU, without the CUDA call)."""

    def __init__(self, label: str, log: list[tuple[str, str]], module=None, class_name="Model", precision="float64"):
        self.label, self.log, self.device = label, log, "cuda"
        self.harness = worker.Harness(None, "cpu", 1)
        assert self.harness.op_load(
            Load(problem=str(PROBLEMS / "scale_add.py"), module=module, class_name=class_name, precision=precision)
        )["ok"]
        assert self.harness.op_construct(Construct(seed=3))["ok"]
        self.harness._new_threads = lambda: []  # in this process the trials' own thread pool shows

    def request(self, message, timeout_s, phase, gate=None):
        self.log.append((self.label, message["op"]))
        if message["op"] == "gate":  # in this process there is no channel to ask the bot over
            return {"ok": True, "hooks": []}
        reply = getattr(self.harness, f"op_{message['op']}")(parse_request(message))
        assert reply["ok"], reply
        return reply

    def threads_seen(self, reported):
        return reported  # no process of its own to count threads in from outside


def test_each_worker_gives_its_gpu_cache_back_as_soon_as_its_trials_are_done():
    # On the H200 26 idle contenders' caches, held until the last one's trials ended, ran
    # rmsnorm's 8192x8192 shape out of memory beside another problem.
    import random

    from conftest import CANDIDATES

    from bot.engine.verification.trials import TrialRun, run_trials
    from bot.engine.workspace.problems import load_problem

    problem = load_problem(PROBLEMS / "scale_add.py")
    log: list[tuple[str, str]] = []
    reference = _LoggedWorker("reference", log)
    contenders = {n: _LoggedWorker(n, log, str(CANDIDATES / "honest.py"), "ModelNew", "native") for n in ("a", "b")}
    _, checks, _ = run_trials(
        TrialRun(problem, problem.shapes_for("cpu")[0], reference, random.Random(0), 1, (20.0, 20.0), 1),
        contenders,
        lambda _: None,
    )
    assert all(c.passed for found in checks.values() for c in found)
    first_contender_call = min(i for i, (who, _) in enumerate(log) if who != "reference")
    assert ("reference", "release") in log[:first_contender_call]
    # Trial by trial, each call followed by its worker's release: with one contender at a time
    # (parallel=1) no contender holds a cache while the other calls.
    calls = [entry for entry in log[first_contender_call:]]
    assert calls == [(name, op) for _ in DISTRIBUTIONS for name in ("a", "b") for op in ("run", "release")]


def test_references_too_large_to_hold_are_asked_for_again_once_a_trial_with_the_same_verdicts(monkeypatch):
    # KernelBench's 19_ReLU: 12 GiB of float64 reference outputs a trial, held for all eight
    # trials, ran the host out of memory. Past the bound, the bot's process holds one trial's.
    import random

    from conftest import CANDIDATES

    from bot.engine.verification import expected, trials
    from bot.engine.workspace.problems import load_problem

    problem = load_problem(PROBLEMS / "scale_add.py")

    def verdicts(hold_bytes: int) -> tuple[dict, list]:
        monkeypatch.setattr(expected, "REFERENCE_HOLD_BYTES", hold_bytes)
        log: list[tuple[str, str]] = []
        files = {"honest": "honest", "wrong": "cheat_distribution"}  # wrong beyond standard inputs
        contenders = {
            n: _LoggedWorker(n, log, str(CANDIDATES / f"{f}.py"), "ModelNew", "native") for n, f in files.items()
        }
        _, checks, _ = trials.run_trials(
            trials.TrialRun(
                problem,
                problem.shapes_for("cpu")[0],
                _LoggedWorker("reference", log),
                random.Random(0),
                1,
                (20.0, 20.0),
                1,  # these workers share one process and its random generator: a call at a time
            ),
            contenders,
            lambda _: None,
        )
        return {n: [(c.name, c.passed) for c in found] for n, found in checks.items()}, log

    held, held_log = verdicts(1 << 40)
    asked, asked_log = verdicts(0)
    assert held == asked and not all(p for _, p in held["wrong"]) and all(p for _, p in held["honest"])
    reference_runs = [op for who, op in held_log if who == "reference" and op == "run"]
    again = [op for who, op in asked_log if who == "reference" and op == "run"]
    # "wrong" fails a later trial, "honest" none: one more reference call a trial, not one a contender.
    assert len(again) == len(reference_runs) + len(DISTRIBUTIONS)


def test_evaluate_gives_each_timed_workers_gpu_cache_back_when_the_shape_is_timed(monkeypatch, quick_options):
    from conftest import CANDIDATES

    import bot.engine.evaluation.evaluate as evaluate_module
    import bot.engine.evaluation.worker_pool as eval_workers
    from bot.engine.timing.records import TimingOptions
    from bot.engine.workspace.candidates import load_candidate
    from bot.engine.workspace.problems import load_problem

    released: list[str] = []
    real = eval_workers.release_cache

    def spy(worker, timeout_s):
        released.append(worker.label)
        real(worker, timeout_s)

    monkeypatch.setattr(eval_workers, "release_cache", spy)
    baseline = load_candidate(CANDIDATES / "honest.py")
    problem = load_problem(PROBLEMS / "scale_add.py")
    result = evaluate_module.evaluate(
        problem,
        [load_candidate(CANDIDATES / "slow2x.py")],
        baseline,
        quick_options(timing=TimingOptions(time_cap_s=0.5, min_samples=5, replicas=2)),
    )
    assert result.candidates[0].verdict.accepted
    # Once per shape, each worker that timed it (the baseline's and the candidate's, two each),
    # and the reference that checked the timed calls.
    shapes = len(problem.shapes_for("cpu"))
    assert shapes >= 2 and sorted(released) == sorted(["c0", "c0-r2", "c1", "c1-r2", "reference"] * shapes), released


def test_contenders_that_tune_by_timing_run_their_trials_alone_after_the_others():
    import random

    from conftest import CANDIDATES

    from bot.engine.verification.trials import DeviceHolds, TrialRun, run_trials
    from bot.engine.workspace.problems import load_problem

    problem = load_problem(PROBLEMS / "scale_add.py")
    log: list[tuple[str, str]] = []
    contenders = {
        n: _LoggedWorker(n, log, str(CANDIDATES / "honest.py"), "ModelNew", "native")
        for n in ("a", "b", "tuned1", "tuned2")
    }
    seen: list[str] = []

    def held(kind):
        @contextlib.contextmanager
        def hold():
            log.append(("lock", f"{kind} taken"))
            yield
            log.append(("lock", f"{kind} given back"))

        return hold

    _, checks, _ = run_trials(
        TrialRun(
            problem, problem.shapes_for("cpu")[0], _LoggedWorker("reference", log), random.Random(0), 1, (20.0, 20.0), 1
        ),
        contenders,
        lambda event: seen.append(event.line()),
        DeviceHolds(alone=frozenset({"tuned1", "tuned2"}), shared=held("shared"), exclusive=held("exclusive")),
    )
    assert list(checks) == list(contenders)  # every contender judged, in the order given
    assert all(c.passed for found in checks.values() for c in found)
    # The reference under a shared hold (its first trial, which sizes the shape, under one of
    # its own), each other trial call under one of its own; the
    # self-tuning contenders' workers cannot hook their timing (no channel here), so each
    # one's trials (a call per distribution and its release) run afterwards under an exclusive
    # hold of its own.
    n = len(DISTRIBUTIONS)
    who = [w if w != "lock" else op for w, op in log]
    sized = ["shared taken", "reference", "shared given back"]
    head = sized + ["shared taken"] + ["reference"] * n + ["shared given back"] + ["tuned1"]
    assert who[: len(head)] == head
    assert who[len(head)] == "tuned2"  # both asked to hook their timing first ("gate"), in vain
    parallel = who[len(head) + 1 : who.index("exclusive taken")]
    # Trial by trial, each call under its hold and followed by its worker's release.
    assert (
        parallel == ["shared taken", "a", "shared given back", "a", "shared taken", "b", "shared given back", "b"] * n
    )
    assert who[len(parallel) + len(head) + 1 :] == (
        ["exclusive taken"]
        + ["tuned1"] * (2 * n)
        + ["exclusive given back"]
        + ["exclusive taken"]
        + ["tuned2"] * (2 * n)
        + ["exclusive given back"]
    )
    assert any("2 contender(s) that tune by timing" in line for line in seen)


def test_code_that_times_its_own_kernel_variants_is_recognised():
    from bot.engine.verification.trials import tunes_on_first_call

    assert tunes_on_first_call("@triton.autotune(configs=[...], key=['n'])\n@triton.jit\ndef k(): pass")
    assert tunes_on_first_call("torch.compile(f, mode='max-autotune-no-cudagraphs')")
    assert tunes_on_first_call("torch.compile(f, dynamic=False, options={'triton.multi_kernel': 1})")
    assert tunes_on_first_call("torch.compile(f, options={'coordinate_descent_tuning': True})")
    assert not tunes_on_first_call("torch.compile(f, dynamic=False)\n@triton.jit\ndef k(): pass")


def test_a_trial_reply_missing_a_field_fails_that_contender_and_the_others_carry_on():
    # The worker is the candidate's process: it can answer a trial with anything it likes.
    import random

    from conftest import CANDIDATES

    from bot.engine.verification.trials import TrialRun, run_trials
    from bot.engine.workspace.problems import load_problem

    class _Forger(_LoggedWorker):
        def request(self, message, timeout_s, phase, gate=None):
            reply = super().request(message, timeout_s, phase, gate)
            if message["op"] == "run":
                reply = {k: v for k, v in reply.items() if k != "inputs_after"}
            return reply

    problem = load_problem(PROBLEMS / "scale_add.py")
    log: list[tuple[str, str]] = []
    contenders = {
        "forger": _Forger("forger", log, str(CANDIDATES / "honest.py"), "ModelNew", "native"),
        "honest": _LoggedWorker("honest", log, str(CANDIDATES / "honest.py"), "ModelNew", "native"),
    }
    _, checks, _ = run_trials(
        TrialRun(
            problem, problem.shapes_for("cpu")[0], _LoggedWorker("reference", log), random.Random(0), 1, (20.0, 20.0), 1
        ),
        contenders,
        lambda _: None,
    )
    failed = [c for c in checks["forger"] if not c.passed]
    assert [c.name for c in failed] == ["protocol"]
    assert "malformed reply to op 'run'" in failed[0].evidence and "inputs_after" in failed[0].evidence
    assert checks["honest"] and all(c.passed for c in checks["honest"])


def test_only_the_first_reference_trial_holds_the_sizing_and_the_problem_is_admitted_on_it():
    # While one problem's reference held the sizing through all eight trials (KernelBench's
    # 19_ReLU: 42 s each), every other problem waited to grow: two showed no progress for minutes.
    import contextlib
    import random

    from conftest import CANDIDATES

    from bot.engine.verification.trials import TrialRun, run_trials
    from bot.engine.workspace.problems import load_problem

    problem = load_problem(PROBLEMS / "scale_add.py")
    log: list[tuple[str, str]] = []

    @contextlib.contextmanager
    def sizing():
        log.append(("budget", "sizing"))
        yield
        log.append(("budget", "sized"))

    def admit(info):
        assert info.peak_bytes is None and info.meta  # on a CPU: no device peak, the outputs known
        log.append(("budget", "admit"))
        return 1

    reference = _LoggedWorker("reference", log)
    contender = _LoggedWorker("a", log, str(CANDIDATES / "honest.py"), "ModelNew", "native")
    run_trials(
        TrialRun(
            problem,
            problem.shapes_for("cpu")[0],
            reference,
            random.Random(0),
            1,
            (20.0, 20.0),
            1,
            admit=admit,
            sizing=sizing,
        ),
        {"a": contender},
        lambda _: None,
    )
    runs = [i for i, entry in enumerate(log) if entry == ("reference", "run")]
    assert len(runs) > 2
    assert log.index(("budget", "sizing")) < runs[0] < log.index(("budget", "sized")) < runs[1]
    assert log.index(("budget", "sized")) < log.index(("budget", "admit")) < runs[1]


def test_references_asked_again_for_a_contender_that_tunes_alone_do_not_wait_on_its_own_hold(monkeypatch):
    # The contenders that tune by timing take their trials under the device's exclusive hold;
    # asking the reference again under a shared hold inside it would wait on that hold forever.
    import random
    import threading

    from conftest import CANDIDATES

    from bot.engine.verification import expected
    from bot.engine.verification.trials import DeviceHolds, TrialRun, run_trials
    from bot.engine.workers.gpulock import _RWLock
    from bot.engine.workspace.problems import load_problem

    monkeypatch.setattr(expected, "REFERENCE_HOLD_BYTES", 0)  # every trial's outputs asked again
    problem = load_problem(PROBLEMS / "scale_add.py")
    log: list[tuple[str, str]] = []
    contenders = {n: _LoggedWorker(n, log, str(CANDIDATES / "honest.py"), "ModelNew", "native") for n in ("a", "tuned")}
    lock = _RWLock()
    found: dict = {}

    def run() -> None:
        _, found["checks"], _ = run_trials(
            TrialRun(
                problem,
                problem.shapes_for("cpu")[0],
                _LoggedWorker("reference", log),
                random.Random(0),
                1,
                (20.0, 20.0),
                1,
            ),
            contenders,
            lambda _: None,
            DeviceHolds(alone=frozenset({"tuned"}), shared=lock.shared, exclusive=lock.exclusive),
        )

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(60)
    assert not worker.is_alive(), "the trials waited on their own hold"
    assert all(c.passed for checks in found["checks"].values() for c in checks)
