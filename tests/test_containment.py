"""Every process a candidate starts is contained: counted, frozen and killed from outside, and
unable to reach the bot, other workers or their secrets (docs/security.md, issue families 3, 4, 6)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import CANDIDATES, PROBLEMS

from bot.engine.evaluation.evaluate import evaluate
from bot.engine.workspace.candidates import load_candidate
from bot.engine.workspace.problems import load_problem
from bot.sandbox import Limits
from bot.sandbox.cgroup import TOP, cgroup2_mount
from bot.sandbox.contained import containment

REPO = Path(__file__).resolve().parents[1]
BACKENDS = ["process", pytest.param("docker", marks=pytest.mark.docker)]
pytestmark = pytest.mark.skipif(
    not containment().cgroups or not containment().namespaces, reason=f"containment here is {containment().description}"
)


def _verdicts(names, quick_options, **opts):
    problem = load_problem(PROBLEMS / "scale_add.py")
    result = evaluate(problem, [load_candidate(CANDIDATES / f"{n}.py") for n in names], None, quick_options(**opts))
    return {o.candidate.name: o.verdict for o in result.candidates}


def _pids_with(argument: str) -> list[int]:
    """Processes whose command line holds `argument` as a word."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if argument.encode() in f.read().split(b"\0"):
                    found.append(int(entry))
        except (OSError, ValueError):
            continue
    return found


def test_a_child_that_renices_and_repins_everyone_reaches_nobody_and_is_rejected(quick_options):
    victim = subprocess.Popen(["sleep", "300"])
    try:
        before = (
            os.getpriority(os.PRIO_PROCESS, 0),
            os.sched_getaffinity(0),
            os.getpriority(os.PRIO_PROCESS, victim.pid),
            os.sched_getaffinity(victim.pid),
        )
        verdicts = _verdicts(["cheat_starve_others", "honest"], quick_options)
        after = (
            os.getpriority(os.PRIO_PROCESS, 0),
            os.sched_getaffinity(0),
            os.getpriority(os.PRIO_PROCESS, victim.pid),
            os.sched_getaffinity(victim.pid),
        )
    finally:
        victim.kill()
        victim.wait()
    assert after == before  # neither the bot nor another process was reniced or re-pinned
    cheat = verdicts["cheat_starve_others"]
    assert not cheat.accepted and "besides the worker in its cgroup" in " ".join(cheat.reasons), cheat.reasons
    assert verdicts["honest"].accepted, verdicts["honest"].reasons


def test_a_daemon_is_rejected_and_gone_when_its_worker_is_closed(quick_options):
    verdicts = _verdicts(["cheat_daemon", "honest"], quick_options)
    cheat = verdicts["cheat_daemon"]
    assert not cheat.accepted and "besides the worker in its cgroup" in " ".join(cheat.reasons), cheat.reasons
    assert verdicts["honest"].accepted, verdicts["honest"].reasons
    assert _pids_with("86391") == []


def _descendants(root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        try:
            ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry))
        except (OSError, ValueError, IndexError):
            continue
    found, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.parametrize("sandbox", BACKENDS)
def test_nothing_of_a_bot_killed_with_sigkill_survives_it(sandbox):
    bot = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bot",
            "verify",
            str(PROBLEMS / "scale_add.py"),
            str(CANDIDATES / "cheat_daemon_then_hang.py"),
            "--sandbox",
            sandbox,
        ],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while not _pids_with("86392") and time.monotonic() < deadline:
        time.sleep(0.2)
    daemons = _pids_with("86392")
    assert daemons, "the candidate's daemon never started"
    family = _descendants(bot.pid) | set(daemons)
    run_dirs = list((cgroup2_mount() / TOP).glob(f"{bot.pid}-*"))
    assert run_dirs or sandbox == "docker"  # its workers' cgroups exist while it runs
    bot.send_signal(signal.SIGKILL)
    bot.wait()
    deadline = time.monotonic() + 5
    while any(map(_alive, family)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [p for p in family if _alive(p)] == []
    assert not any(d.exists() for d in run_dirs)
    if sandbox == "docker":
        import docker

        from bot.sandbox.containers import PID_LABEL

        left = docker.from_env().containers.list(all=True, filters={"label": f"{PID_LABEL}={bot.pid}"})
        assert left == []


SECRETS = {
    "GITHUB_TOKEN": "ghp_kernelbotTestToken0123456789",
    "OPENAI_API_KEY": "sk-kernelbot-test-0123456789",
    "FOO_TOKEN": "foo-token-value-0123456789",
    "BAR_KEY": "canary-kernel-bot-7f3a9c",
}  # the candidate prints this one: it must be redacted


@pytest.mark.parametrize(
    "command,sandbox",
    [("verify", "process"), ("bench", "process"), pytest.param("verify", "docker", marks=pytest.mark.docker)],
)
def test_a_candidate_finds_no_secret_and_none_reaches_the_output(command, sandbox):
    env = {**os.environ, **SECRETS}
    args = [
        sys.executable,
        "-m",
        "bot",
        command,
        str(PROBLEMS / "scale_add.py"),
        str(CANDIDATES / "cheat_read_secrets.py"),
        "--json",
        "--sandbox",
        sandbox,
    ]
    if command == "bench":
        args += ["--time-cap-s", "0.2"]
    done = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    out = done.stdout + done.stderr
    assert "FOUND []" in out, out[-3000:]  # the candidate's own search came back empty
    expected = "container" if sandbox == "docker" else containment().description
    assert f'"containment": "{expected}"' in out
    assert "[redacted]" in out  # what it printed that matched a secret was replaced
    for value in SECRETS.values():
        assert value not in out


HANG_LIMITS = Limits(
    memory_mb=4096,
    import_timeout_s=120,
    construct_timeout_s=600,
    call_timeout_s=600,
    first_call_timeout_s=600,
    stall_timeout_s=3.0,
)


@pytest.mark.parametrize("sandbox", BACKENDS)
def test_hangs_are_rejected_within_the_stall_bound_and_a_busy_first_call_is_not(quick_options, sandbox):
    began = time.monotonic()
    verdicts = _verdicts(
        ["hang_forever", "hang_deadlock", "hang_pipe_read", "slow_first_call_cpu"],
        quick_options,
        limits=HANG_LIMITS,
        parallel=4,
        sandbox=sandbox,
    )
    took = time.monotonic() - began
    for name in ("hang_forever", "hang_deadlock", "hang_pipe_read"):
        reason = " ".join(verdicts[name].reasons)
        assert not verdicts[name].accepted and "no progress for 3 s" in reason, reason
    assert verdicts["slow_first_call_cpu"].accepted, verdicts["slow_first_call_cpu"].reasons
    assert took < 120  # not the 600 s call timeout


@pytest.mark.slow
def test_bot_verify_rejects_a_sleeping_forward_with_the_default_stall_bound():
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "bot", "verify", str(PROBLEMS / "scale_add.py"), str(CANDIDATES / "hang_forever.py")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 1 and "no progress for 60 s" in done.stdout, done.stdout[-2000:]
    assert time.monotonic() - began < 150  # the first call's own limit is 900 s


@pytest.mark.docker
def test_docker_workers_children_are_counted_and_killed_and_reach_nobody(quick_options):
    victim = subprocess.Popen(["sleep", "300"])
    try:
        before = (os.getpriority(os.PRIO_PROCESS, 0), os.getpriority(os.PRIO_PROCESS, victim.pid))
        verdicts = _verdicts(["cheat_starve_others", "cheat_daemon", "honest"], quick_options, sandbox="docker")
        after = (os.getpriority(os.PRIO_PROCESS, 0), os.getpriority(os.PRIO_PROCESS, victim.pid))
    finally:
        victim.kill()
        victim.wait()
    assert after == before
    for name in ("cheat_starve_others", "cheat_daemon"):
        reasons = " ".join(verdicts[name].reasons)
        assert not verdicts[name].accepted and "besides the worker in its cgroup" in reasons, reasons
    assert verdicts["honest"].accepted, verdicts["honest"].reasons
    assert _pids_with("86391") == []
