"""The process sandbox keeps a candidate off the host: files it plants in /tmp, /var/tmp and
/dev/shm never reach the host, unix sockets bound to host paths are out of its reach, a
limit on processes stops a fork storm with a clear reason, and the bot's lock files cannot
be planted or held by it (docs/security.md, "Reaching the host")."""

from __future__ import annotations

import itertools
import os
import socket
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest
from conftest import CANDIDATES, PROBLEMS

from bot.engine.evaluation.evaluate import evaluate
from bot.engine.evaluation.options import EvalOptions
from bot.engine.timing.records import TimingOptions
from bot.engine.workspace.candidates import load_candidate
from bot.engine.workspace.problems import load_problem
from bot.sandbox import Limits
from bot.sandbox.contained import containment

REPO = Path(__file__).resolve().parents[1]
PLANT = "kernel_bot_host_plant"
OPEN_FOLDER = Path("/opt/kernel-bot-open-folder")  # a host folder anyone may write
PLANT_FOLDERS = (
    "/tmp",
    "/var/tmp",
    "/dev/shm",
    "/tmp/torchinductor_kernel-bot-worker",
    "/tmp/torchinductor_root",
    str(OPEN_FOLDER),
)
SOCKET_NAME = "kernel-bot-host-service.sock"
SOCKET_FOLDERS = ("/tmp", "/run", "/var/tmp", "/dev/shm")
LOCK_TARGET = Path("/root/kernel_bot_planted_lock_target")

pytestmark = pytest.mark.skipif(
    not containment().cgroups or not containment().namespaces, reason=f"containment here is {containment().description}"
)


def _listeners() -> list[tuple[Path, socket.socket]]:
    """A listening unix socket in each host folder, writable by anyone (so that only the
    sandbox, not the socket's mode, can keep a worker out)."""
    made = []
    for folder in SOCKET_FOLDERS:
        path = Path(folder) / SOCKET_NAME
        if not Path(folder).is_dir():
            continue
        path.unlink(missing_ok=True)
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(str(path))
        os.chmod(path, 0o777)
        server.listen(8)
        server.setblocking(False)
        made.append((path, server))
    return made


def _accepted(server: socket.socket) -> list[bytes]:
    said = []
    while True:
        try:
            conn, _ = server.accept()
        except BlockingIOError:
            return said
        with conn:
            conn.settimeout(1)
            try:
                said.append(conn.recv(100))
            except OSError:
                said.append(b"")


@pytest.fixture(scope="module")
def hostile_run():
    """One evaluation of the hostile candidates beside the honest one, with host listeners."""
    for folder in PLANT_FOLDERS:
        (Path(folder) / PLANT).unlink(missing_ok=True)
    OPEN_FOLDER.mkdir(exist_ok=True)
    os.chmod(OPEN_FOLDER, 0o777)
    listeners = _listeners()
    try:
        problem = load_problem(PROBLEMS / "scale_add.py")
        names = ["host_plant_files", "host_unix_socket", "host_forkbomb", "honest"]
        options = EvalOptions(
            device="cpu",
            use_cache=False,
            limits=Limits(memory_mb=4096, import_timeout_s=120, construct_timeout_s=60, call_timeout_s=20),
            timing=TimingOptions(time_cap_s=0.5, min_samples=5),
            cache_root=Path(os.environ.get("KERNEL_BOT_TEST_CACHE", "/tmp/kernel-bot-test-cache")),
            parallel=2,
        )
        result = evaluate(problem, [load_candidate(CANDIDATES / f"{n}.py") for n in names], None, options)
        reached = {str(path): _accepted(server) for path, server in listeners}
    finally:
        for path, server in listeners:
            server.close()
            path.unlink(missing_ok=True)
    planted = [folder for folder in PLANT_FOLDERS if (Path(folder) / PLANT).exists()]
    (OPEN_FOLDER / PLANT).unlink(missing_ok=True)
    OPEN_FOLDER.rmdir()
    verdicts = {o.candidate.name: o.verdict for o in result.candidates}
    return verdicts, reached, planted


def test_files_planted_in_tmp_var_tmp_dev_shm_or_an_open_folder_never_reach_the_host(hostile_run):
    verdicts, _, planted = hostile_run
    assert planted == []  # nor a compile cache in /tmp/torchinductor_<user> that a later run would trust
    # The honest twin works in the same sandbox (its timing checks are left out: under the
    # load of a shared 2-vCPU machine they say more about the machine than the sandbox).
    honest = [c for c in verdicts["honest"].checks if c.name not in ("hidden time", "wall clock")]
    assert honest and all(c.passed for c in honest), verdicts["honest"].reasons


def test_a_unix_socket_bound_to_a_host_path_is_out_of_reach(hostile_run):
    _, reached, _ = hostile_run
    assert reached and all(said == [] for said in reached.values()), reached


def test_a_fork_storm_is_stopped_by_the_process_limit_and_rejected_for_it(hostile_run):
    verdicts, _, _ = hostile_run
    verdict = verdicts["host_forkbomb"]
    assert not verdict.accepted
    assert "process limit" in " ".join(verdict.reasons), verdict.reasons


def test_lock_files_planted_in_tmp_neither_hang_bot_verify_nor_make_it_create_a_file():
    LOCK_TARGET.unlink(missing_ok=True)
    began = time.monotonic()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bot",
            "verify",
            str(PROBLEMS / "scale_add.py"),
            str(CANDIDATES / "host_plant_locks.py"),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]  # honest apart from its plants
    assert not LOCK_TARGET.exists()
    assert time.monotonic() - began < 120


def test_replicas_share_their_sources_gid_and_no_other_source_gets_it(tmp_path):
    # A gid made from a hash of the cache folder's name could be ground to match the baseline's,
    # whose compile cache its group may write.
    from bot.sandbox.base import WorkerLaunch
    from bot.sandbox.contained import prepare

    def crc(name: str) -> int:
        return zlib.crc32(str(tmp_path / "compile" / name).encode()) % (1 << 16)

    ground = next(f"b{i}" for i in itertools.count() if crc(f"b{i}") == crc("a"))  # what a candidate would do
    made = []
    try:
        for n, source in enumerate(["a", "a", ground]):
            launch = WorkerLaunch(tmp_path / f"w{n}", tmp_path / "compile" / source, (), "cpu")
            launch.workdir.mkdir()
            launch.cache_dir.mkdir(parents=True, exist_ok=True)
            made.append(prepare(launch, launch.workdir / "worker.log"))
        uids = [m.plan.uid for m in made]
        gids = [m.plan.gid for m in made]
        assert len(set(uids)) == 3 and gids[0] == gids[1] != gids[2]
        assert (tmp_path / "compile" / ground).stat().st_gid == gids[2]
    finally:
        for m in made:
            if m.leaf is not None:
                m.leaf.kill()
            if m.pids is not None and m.leaf is not None and m.pids.path != m.leaf.path:
                m.pids.remove()


@pytest.mark.gpu
def test_cuda_triton_and_compiled_candidates_run_whole_under_the_containment():
    # The GPU's device nodes, the driver and the compilers (nvcc, ptxas, Triton) work with a
    # private /run and /tmp, the rest read-only and the process limit (on a host of many cores
    # two per core and 64 more).
    problem = load_problem(PROBLEMS / "big_add.py")
    names = ["big_add_triton", "big_add_cuda"]
    options = EvalOptions(
        device="cuda",
        use_cache=False,
        limits=Limits(memory_mb=32768, call_timeout_s=60),
        timing=TimingOptions(time_cap_s=1.0, min_samples=10),
        cache_root=Path("/tmp/kernel-bot-gpu-cache"),
    )
    result = evaluate(problem, [load_candidate(CANDIDATES / f"{n}.py") for n in names], None, options)
    assert {"pids", "mntns", "uid"} <= set(result.environment.containment.split("+")), result.environment
    for outcome in result.candidates:
        assert outcome.verdict.accepted, (outcome.candidate.name, outcome.verdict.reasons)
