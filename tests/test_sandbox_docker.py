"""The docker sandbox against hostile candidates, through the real evaluation path.

Needs a Docker engine (`sudo ci/start-dockerd.sh`). Without one these tests skip, except
when CI is set: there a missing engine FAILS, so a broken runner cannot pass silently.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bot.core.errors import BotError
from bot.engine.evaluation.evaluate import evaluate
from bot.engine.evaluation.options import EvalOptions
from bot.engine.timing.records import TimingOptions
from bot.engine.workers.client import WorkerClient
from bot.engine.workspace.candidates import load_candidate
from bot.engine.workspace.problems import load_problem
from bot.sandbox import Limits, WorkerLaunch

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
PROBLEM = FIXTURES / "problems" / "scale_add.py"
CANDIDATES = FIXTURES / "candidates"


@pytest.fixture(scope="module")
def engine():
    """A docker client; a missing engine skips, or fails when CI is set."""
    try:
        from bot.sandbox.docker import connect

        client = connect()
    except (BotError, ImportError) as exc:
        if os.environ.get("CI"):
            pytest.fail(f"CI is set but the Docker engine is unusable: {exc}", pytrace=False)
        pytest.skip(f"no Docker engine: {exc}")
    yield client
    # This process's workers only: other test processes run containers of their own meanwhile,
    # and removing one of theirs fails their test (or conflicts with its own removal: 409).
    from bot.sandbox.containers import RUN_ID, RUN_LABEL, remove_leftover_workers

    left = client.containers.list(all=True, filters={"label": f"{RUN_LABEL}={RUN_ID}"})
    remove_leftover_workers(client)
    assert not left, f"kernel-bot worker containers left behind: {[c.name for c in left]}"


@pytest.fixture(autouse=True)
def no_leftovers(request):
    """After every test: no container of this run is left (and none is kept if one was)."""
    yield
    if "engine" not in request.fixturenames:
        return
    from bot.sandbox.containers import RUN_ID, remove_leftover_workers

    client = request.getfixturevalue("engine")
    left = client.containers.list(all=True, filters={"label": f"kernel-bot.run={RUN_ID}"})
    remove_leftover_workers(client)
    assert not left, f"worker containers left behind: {[c.name for c in left]}"


def verify(candidate: str, tmp_path: Path, **limits):
    options = EvalOptions(
        device="cpu",
        use_cache=False,
        sandbox="docker",
        limits=Limits(**limits),
        timing=TimingOptions(time_cap_s=0.5, min_samples=5),
        cache_root=tmp_path / "cache",
    )
    result = evaluate(load_problem(PROBLEM), [load_candidate(CANDIDATES / candidate)], None, options)
    return result.candidates[0].verdict


def test_honest_candidate_is_accepted(engine, tmp_path):
    verdict = verify("honest.py", tmp_path)
    assert verdict.accepted, verdict.reasons


def test_container_is_confined(engine, tmp_path):
    from bot.sandbox.docker import DockerSandbox

    launch = WorkerLaunch(
        workdir=tmp_path / "w",
        cache_dir=tmp_path / "c",
        readable=(PROBLEM,),
        device="cpu",
        limits=Limits(memory_mb=2048, pids=100, cpus=1.5),
    )
    worker = DockerSandbox().start(launch)
    try:
        attrs = engine.api.inspect_container(worker.id)
        host, config = attrs["HostConfig"], attrs["Config"]
        assert host["NetworkMode"] == "none" and host["ReadonlyRootfs"] is True
        assert host["CapDrop"] == ["ALL"] and "no-new-privileges" in host["SecurityOpt"]
        assert host["PidsLimit"] == 100 and host["NanoCpus"] == 1_500_000_000
        assert host["Memory"] == host["MemorySwap"] == 2048 << 20
        if os.getuid() == 0:
            assert config["User"] == "65534:65534"
        sources = {m["Source"]: m for m in attrs["Mounts"]}
        for bad in ("/", "/root", str(Path.home()), "/var/run/docker.sock", "/run/docker.sock"):
            assert bad not in sources
        writable = {m["Destination"] for m in attrs["Mounts"] if m["RW"]}
        assert writable == {"/kernel-bot/cache", "/chan"}
        assert os.listdir(sources[next(s for s, m in sources.items() if m["Destination"] == "/chan")]["Source"]) == []
        assert config["Labels"]["kernel-bot.worker"] == "1"
    finally:
        worker.kill()
        worker.kill()  # idempotent
    assert not engine.containers.list(all=True, filters={"id": worker.id})


def test_no_network(engine, tmp_path):
    port = int(re.search(r"^PORT = (\d+)", (CANDIDATES / "docker_network.py").read_text(), re.M)[1])
    listeners = []
    bridge = engine.networks.get("bridge").attrs["IPAM"]["Config"]
    for address in ["127.0.0.1"] + [c["Gateway"] for c in bridge if "Gateway" in c]:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            listener.bind((address, port))
        except OSError as exc:
            pytest.fail(f"cannot listen on {address}:{port}: {exc}")
        listener.listen(8)
        listener.setblocking(False)
        listeners.append(listener)
    try:
        verdict = verify("docker_network.py", tmp_path)
        for listener in listeners:  # a completed handshake would wait in the backlog
            with pytest.raises(BlockingIOError):
                listener.accept()
    finally:
        for listener in listeners:
            listener.close()
    assert verdict.accepted, verdict.reasons


SECRETS = {
    "GITHUB_TOKEN": "ghp_test_secret",
    "OPENAI_API_KEY": "sk-test-secret",
    "AWS_SECRET_ACCESS_KEY": "aws-test-secret",
}


def _log_after_import(tmp_path, name: str, cand: Path, readable: tuple[Path, ...], limit: int) -> str:
    """A docker worker's log once it has imported `cand` and been killed: a container's output
    reaches its log on the engine's schedule, and the log is whole only once the engine has
    seen the container exit (as every failure that ends a worker reads it)."""
    from bot.sandbox.docker import DockerSandbox

    launch = WorkerLaunch(
        workdir=tmp_path / "w", cache_dir=tmp_path / "c", readable=readable, device="cpu", limits=Limits()
    )
    client = WorkerClient(DockerSandbox(), name, launch)
    try:
        load = {"op": "load", "problem": str(PROBLEM), "module": str(cand), "class_name": "ModelNew"}
        client.request({**load, "precision": "native"}, 120, "import")
        client.running.kill()
        return client.running.log_tail(limit)
    finally:
        client.close()


def test_no_secrets_in_environment_or_log(engine, tmp_path, monkeypatch):
    for key, value in SECRETS.items():
        monkeypatch.setenv(key, value)
    verdict = verify("docker_secrets.py", tmp_path)
    assert verdict.accepted, verdict.reasons
    # The candidate prints its whole environment at import: read the worker's log.
    cand = CANDIDATES / "docker_secrets.py"
    log = _log_after_import(tmp_path, "secrets", cand, (PROBLEM, ROOT, cand), 100_000)
    assert "worker environment:" in log and "/kernel-bot/work" in log
    assert "secret" not in log.lower()


def test_a_killed_workers_log_holds_all_it_printed(engine, tmp_path):
    """The engine copies a container's output into its log on its own schedule: a log read
    the moment a worker answers can miss what it printed just before. Read after the
    worker is killed (as every failure does), it holds the last line."""
    cand = tmp_path / "chatty.py"
    cand.write_text(
        "import sys\n"
        "sys.stdout.write(''.join(f'line {i} ' + 'x' * 70 + '\\n' for i in range(100_000)))\n"
        "print('LAST-LINE', flush=True)\n"
        "from scale_add_model import ModelNew\n"
    )
    (tmp_path / "scale_add_model.py").write_text((PROBLEM.read_text()).replace("class Model(", "class ModelNew("))
    log = _log_after_import(tmp_path, "chatty", cand, (PROBLEM, ROOT, tmp_path), 1000)
    assert log.rstrip().endswith("LAST-LINE")


def test_writes_outside_the_work_folder_fail(engine, tmp_path):
    import torch

    import bot

    name = "kernel_bot_escape_probe"
    folders = [
        "/tmp",
        "/etc",
        "/",
        "/run",
        str(CANDIDATES),
        str(ROOT),
        sys.prefix,
        sys.base_prefix,
        os.path.dirname(torch.__file__),
        os.path.dirname(bot.__file__),
    ]
    for folder in folders:
        assert not os.path.exists(os.path.join(folder, name)), f"stale probe in {folder}"
    verdict = verify("docker_writes.py", tmp_path)
    escaped = [f for f in folders if os.path.exists(os.path.join(f, name))]
    for folder in escaped:
        os.unlink(os.path.join(folder, name))
    assert not escaped, f"the candidate wrote into {escaped}"
    assert verdict.accepted, verdict.reasons  # every write failed, the work folder worked


def test_fork_bomb_is_contained(engine, tmp_path):
    verdict = verify("docker_forkbomb.py", tmp_path, pids=64)
    assert not verdict.accepted
    reasons = " ".join(verdict.reasons)
    assert "fork bomb stopped" in reasons and "Resource temporarily unavailable" in reasons, reasons
    # Its own forks, by the name each gives itself: a count of the host's processes moved by 20
    # and more with other tests' workers running beside this one (CI runs them in parallel),
    # and other modules' containers run as uid 65534 beside this one too.
    left = [p for p in os.listdir("/proc") if p.isdigit() and _uid(p) == 65534 and _comm(p) == "kb-forkbomb"]
    assert not left, f"the fork bomb's processes left on the host: {left}"


def _comm(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/comm") as comm:
            return comm.read().strip()
    except OSError:
        return ""


def _uid(pid: str) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def test_memory_limit_kills_with_a_clear_reason(engine, tmp_path):
    verdict = verify("docker_memory.py", tmp_path, memory_mb=1024)
    assert not verdict.accepted
    assert "memory limit (OOM)" in " ".join(verdict.reasons), verdict.reasons


def test_hang_is_stopped_at_the_call_timeout(engine, tmp_path):
    t0 = time.monotonic()
    verdict = verify("docker_hang.py", tmp_path, call_timeout_s=5, first_call_timeout_s=5)
    assert not verdict.accepted
    assert "timed out after 5 s" in " ".join(verdict.reasons), verdict.reasons
    assert time.monotonic() - t0 < 120


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_bot_leaves_no_container(engine, signum):
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bot",
            "verify",
            str(PROBLEM),
            str(CANDIDATES / "docker_hang.py"),
            "--sandbox",
            "docker",
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    mine = {"label": f"kernel-bot.parent-pid={proc.pid}"}
    try:
        deadline = time.monotonic() + 120
        while len(engine.containers.list(filters=mine)) < 2:  # reference + the hanging candidate
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.monotonic() < deadline, "the bot never started its workers"
            time.sleep(0.2)
        time.sleep(3)  # into the candidate's forward
        proc.send_signal(signum)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
    left = engine.containers.list(all=True, filters=mine)
    for container in left:
        container.remove(force=True)
    assert not left, f"{signal.Signals(signum).name} left {len(left)} container(s)"


def test_unreachable_engine_is_a_clear_error(monkeypatch):
    from bot.sandbox.docker import DockerSandbox

    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    with pytest.raises(BotError, match="Docker engine is not reachable.*start-dockerd"):
        DockerSandbox()


def test_missing_image_names_how_to_build_it(engine, monkeypatch):
    from bot.sandbox.docker import DockerSandbox

    monkeypatch.setenv("KERNEL_BOT_IMAGE", "kernel-bot-no-such-image:test")
    with pytest.raises(BotError, match="docker build -t kernel-bot-no-such-image:test"):
        DockerSandbox()


def test_gpu_worker_requests_exactly_one_gpu(engine, tmp_path, monkeypatch):
    """The device request names the one GPU. Without the NVIDIA toolkit the engine refuses
    to start it: a clear error and no container left; with it, the worker starts."""
    from docker.models.containers import ContainerCollection

    from bot.core.errors import HarnessError
    from bot.sandbox.docker import DockerSandbox

    seen = []
    real_create = ContainerCollection.create

    def spy(self, *args, **kwargs):  # the real create, then a look before it starts
        container = real_create(self, *args, **kwargs)
        seen.append(engine.api.inspect_container(container.id)["HostConfig"])
        return container

    monkeypatch.setattr(ContainerCollection, "create", spy)
    sandbox = DockerSandbox()
    launch = WorkerLaunch(workdir=tmp_path / "w", cache_dir=tmp_path / "c", readable=(), device="cuda", gpu_index=0)
    try:
        sandbox.start(launch).kill()
    except HarnessError as exc:
        assert "gpu" in str(exc), exc
    [host] = seen
    [request] = host["DeviceRequests"]
    assert request["DeviceIDs"] == ["0"] and request["Capabilities"] == [["gpu"]]


def test_gpu_environment_names_the_one_passed_gpu(engine, tmp_path, monkeypatch):
    from bot.sandbox.docker import DockerSandbox

    monkeypatch.setenv("NVIDIA_VISIBLE_DEVICES", "all")
    launch = WorkerLaunch(workdir=tmp_path / "w", cache_dir=tmp_path / "c", readable=(), device="cuda", gpu_index=3)
    env = DockerSandbox()._environment(launch)
    assert env["CUDA_VISIBLE_DEVICES"] == "0" and "NVIDIA_VISIBLE_DEVICES" not in env
    assert env["HOME"] == env["TMPDIR"] == "/kernel-bot/work"
    assert env["TRITON_CACHE_DIR"] == "/kernel-bot/cache/triton"


def test_a_containers_memory_limit_moves_to_the_problems(engine, tmp_path):
    # Raised once the problem's footprint is measured (docs/sandbox.md, "Memory limits").
    from bot.sandbox.docker import DockerSandbox

    launch = WorkerLaunch(
        workdir=tmp_path / "w",
        cache_dir=tmp_path / "c",
        readable=(PROBLEM,),
        device="cpu",
        limits=Limits(memory_mb=2048),
    )
    worker = DockerSandbox().start(launch)
    try:
        assert engine.api.inspect_container(worker.id)["HostConfig"]["Memory"] == 2048 << 20
        worker.set_memory_limit(3 << 30)
        host = engine.api.inspect_container(worker.id)["HostConfig"]
        assert host["Memory"] == host["MemorySwap"] == 3 << 30
    finally:
        worker.kill()


def test_outputs_lent_across_containers_are_judged_in_the_reference(engine, tmp_path, monkeypatch):
    # The blocks travel as descriptors over the channel's unix socket from one container to
    # the bot and on to another: a right answer written there passes, nothing written is poison.
    import bot.engine.verification.trials as trials

    monkeypatch.setattr(trials, "LEND_OVER_BYTES", 0)
    assert verify("honest.py", tmp_path).accepted
    skipped = verify("cheat_skip_lent_write.py", tmp_path)
    assert not skipped.accepted and any("NaN" in r for r in skipped.reasons), skipped.reasons
