"""Workers that crash, hang, exhaust memory or forge their exit: rejected with a clear
reason, and the bot carries on with the next candidate."""

from __future__ import annotations

import os

from conftest import CANDIDATES, PROBLEMS

from bot.engine.evaluation.evaluate import evaluate
from bot.engine.workspace.candidates import load_candidate
from bot.engine.workspace.problems import load_problem
from bot.sandbox import Limits
from bot.sandbox.base import WorkerLaunch, worker_env


def _run(names, quick_options, **opts):
    problem = load_problem(PROBLEMS / "scale_add.py")
    result = evaluate(problem, [load_candidate(CANDIDATES / f"{n}.py") for n in names], None, quick_options(**opts))
    return {o.candidate.name: o.verdict for o in result.candidates}


def test_crash_hang_and_memory_are_rejected_and_the_bot_carries_on(quick_options):
    verdicts = _run(
        ["crash_segfault", "hang_forever", "memory_hog", "honest"],
        quick_options,
        limits=Limits(memory_mb=2048, call_timeout_s=3, first_call_timeout_s=3, import_timeout_s=120),
    )
    assert "killed by signal 11" in verdicts["crash_segfault"].reasons[0]
    assert "timed out after 3 s" in verdicts["hang_forever"].reasons[0]
    memory = verdicts["memory_hog"].reasons[0].lower()
    assert "memory" in memory or "allocate" in memory, memory
    assert verdicts["honest"].accepted, verdicts["honest"].reasons


def test_worker_environment_is_an_allowlist_without_credentials(tmp_path):
    launch = WorkerLaunch(workdir=tmp_path / "w", cache_dir=tmp_path / "c", readable=(), device="cpu")
    env = worker_env(
        launch,
        {
            "PATH": "/usr/bin",
            "GITHUB_TOKEN": "x",
            "OPENAI_API_KEY": "y",
            "TRITON_API_KEY": "z",
            "AWS_SECRET_ACCESS_KEY": "s",
            "HOME": "/root",
            "PYTHONPATH": "/evil",
            "LD_PRELOAD": "/evil.so",
            "OMP_NUM_THREADS": "2",
        },
    )
    assert env["PATH"] == "/usr/bin" and env["OMP_NUM_THREADS"] == "2"
    assert env["HOME"] == str(launch.workdir)
    for key in (
        "GITHUB_TOKEN",
        "OPENAI_API_KEY",
        "TRITON_API_KEY",
        "AWS_SECRET_ACCESS_KEY",
        "PYTHONPATH",
        "LD_PRELOAD",
    ):
        assert key not in env
    assert env["TRITON_INTERPRET"] == "1"  # Triton candidates run through the interpreter on CPU
    assert env["TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS"] == "0"  # one per worker cost more than it saved


def test_a_fake_torch_on_the_path_cannot_shadow_the_real_one(quick_options, tmp_path, monkeypatch):
    (tmp_path / "torch.py").write_text("raise SystemExit('fake torch imported')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    verdicts = _run(["honest"], quick_options)
    assert verdicts["honest"].accepted, verdicts["honest"].reasons
    assert os.getcwd() == str(tmp_path)


def test_contenders_built_side_by_side_each_keep_their_own_verdict(quick_options):
    # Builds run `parallel` at a time: a failing build and one that starts a thread must
    # still fail only themselves, and the honest one between them pass.
    from bot.core.domain import CandidateSource, Origin

    honest = load_candidate(CANDIDATES / "honest.py")
    broken = CandidateSource(
        "broken-build",
        honest.source
        + (
            "\n\nclass ModelNew(ModelNew):\n    def __init__(self, *args, **kwargs):\n"
            "        raise RuntimeError('no weights for you')\n"
        ),
        Origin("file"),
    )
    threaded = CandidateSource(
        "threaded-build",
        honest.source
        + (
            "\n\nimport threading, time\n\nclass ModelNew(ModelNew):\n    def __init__(self, *args, **kwargs):\n"
            "        super().__init__(*args, **kwargs)\n"
            "        threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
        ),
        Origin("file"),
    )
    problem = load_problem(PROBLEMS / "scale_add.py")
    result = evaluate(problem, [broken, honest, threaded], None, quick_options(parallel=3))
    verdicts = {o.candidate.name: o.verdict for o in result.candidates}
    assert list(verdicts) == ["broken-build", "honest", "threaded-build"]
    assert verdicts["honest"].accepted, verdicts["honest"].reasons
    assert not verdicts["broken-build"].accepted and "no weights for you" in " ".join(verdicts["broken-build"].reasons)
    assert not verdicts["threaded-build"].accepted and "thread" in " ".join(verdicts["threaded-build"].reasons)
