"""The reference worker's fingerprints for timed calls: outputs only. Hashing the inputs (for
the unchanged-inputs check of full trials) goes through host memory, and on the H200 it cost
seconds per timed batch for large inputs."""

from __future__ import annotations

import bot.worker as worker
from conftest import PROBLEMS


def _reference(monkeypatch, hashed: list[int]):
    real = worker._hash_tensor
    monkeypatch.setattr(worker, "_hash_tensor", lambda t: hashed.append(t.numel()) or real(t))
    h = worker.Harness(None, "cpu", 1)
    assert h.op_load({"problem": str(PROBLEMS / "scale_add.py"), "module": None, "precision": "float64"})["ok"]
    assert h.op_construct({"overrides": {}, "seed": 3})["ok"]
    return h


def test_fingerprints_of_timed_calls_do_not_hash_the_inputs(monkeypatch):
    hashed: list[int] = []
    h = _reference(monkeypatch, hashed)
    reply = h.op_fingerprints({"seeds": [5, 6], "distribution": "standard", "fp_seed": 9})
    assert reply["ok"] and len(reply["fingerprints"]) == 2
    assert hashed == []
    # A full trial still records the inputs, so a candidate that changes them is caught.
    full = h.op_run({"seed": 5, "distribution": "standard"})
    assert full["ok"] and hashed and len(full["inputs_before"]) == len(hashed)


def test_release_drops_the_fingerprint_vectors_and_they_come_back_the_same(monkeypatch):
    # On the H200 each worker held GiBs between phases; 56 of them filled the GPU.
    h = _reference(monkeypatch, [])
    before = h.op_fingerprints({"seeds": [5], "distribution": "standard", "fp_seed": 9})["fingerprints"]
    assert h.weights
    assert h.op_release({})["ok"] and not h.weights
    after = h.op_fingerprints({"seeds": [5], "distribution": "standard", "fp_seed": 9})["fingerprints"]
    assert after == before


def test_only_the_reference_worker_describes_the_machine(monkeypatch, quick_options):
    # nvidia-smi is a subprocess per worker; 29 workers started it at once on the H200.
    import bot.workers as workers
    from bot.candidates import load_candidate
    from bot.evaluate import evaluate
    from bot.problems import load_problem
    from conftest import CANDIDATES

    hellos: list[tuple[str, bool]] = []
    real_init = workers.WorkerClient.__init__

    def spy(self, sandbox, label, *args, **kwargs):
        hellos.append((label, kwargs.get("describe", True)))
        real_init(self, sandbox, label, *args, **kwargs)
    monkeypatch.setattr(workers.WorkerClient, "__init__", spy)
    result = evaluate(load_problem(PROBLEMS / "scale_add.py"), [load_candidate(CANDIDATES / "honest.py")],
                      None, quick_options())
    assert result.environment.device_name  # still described, by the reference
    assert sorted(hellos) == sorted([("reference", True), ("c0", False)])
