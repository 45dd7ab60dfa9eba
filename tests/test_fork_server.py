"""Workers forked from the fork server are confined as fresh `python -I` processes are, and
the bot falls back to starting them plainly when the server is off or fails."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from conftest import CANDIDATES, PROBLEMS

from bot.engine.evaluation.evaluate import evaluate
from bot.engine.workspace.candidates import load_candidate
from bot.engine.workspace.problems import load_problem
from bot.sandbox import isolate, process
from bot.sandbox.base import BOT_ROOT, WorkerLaunch, worker_env
from bot.sandbox.contained import containment
from bot.sandbox.fork_client import ForkServer
from bot.sandbox.fork_server import _shut_nvml_down, cuda_driver_initialized
from bot.sandbox.isolate import UID_BASE

NAMESPACES = containment().namespaces  # root here and on CI: each worker in its own namespaces

# A candidate that reports, as its import error, what its process looks like from inside.
PROBE = """
import json, os, resource, sys
sockets = 0
for fd in os.listdir("/proc/self/fd"):
    try:
        sockets += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
    except OSError:
        pass
isa = sys.modules.get("torch._inductor.cpu_vec_isa")
raise RuntimeError("PROBE" + json.dumps({
    "secrets": sum(k in os.environ for k in ("GITHUB_TOKEN", "OPENAI_API_KEY")),
    "interp": os.environ.get("TRITON_INTERPRET"),
    "home": os.environ.get("HOME") == os.getcwd() and "/kernel-bot-" in os.getcwd(),
    "iso": sys.flags.isolated, "leader": os.getsid(0) == os.getpid(), "sockets": sockets,
    "cap": resource.getrlimit(resource.RLIMIT_AS)[0] > 0, "ppid": os.getppid(), "pid": os.getpid(),
    "uid": os.getuid(), "bot_writable": os.access(sys.path[0], os.W_OK),
    "compiler": "torch._inductor.compile_fx" in sys.modules,
    "headers": getattr(sys.modules.get("torch._inductor.config"), "cpp_cache_precompile_headers", None),
    "vector_isa": isa is not None and isa.valid_vec_isa_list.cache_info().currsize == 1,
}) + "PROBE")
"""


def _evaluate(names_or_paths, quick_options):
    problem = load_problem(PROBLEMS / "scale_add.py")
    cands = [load_candidate(p if isinstance(p, Path) else CANDIDATES / f"{p}.py") for p in names_or_paths]
    result = evaluate(problem, cands, None, quick_options())
    return {o.candidate.name: o.verdict for o in result.candidates}


def _probe(tmp_path, quick_options) -> dict:
    path = tmp_path / "probe_self.py"
    path.write_text(PROBE)
    reason = _evaluate([path], quick_options)["probe_self"].reasons[0]
    return json.loads(reason.split("PROBE")[1])  # the reason may quote the error twice


def _cpu_launch(tmp_path: Path) -> WorkerLaunch:
    return WorkerLaunch(workdir=tmp_path / "w", cache_dir=tmp_path / "c", readable=(), device="cpu")


def test_a_forked_worker_is_confined_like_a_fresh_process(tmp_path, quick_options, monkeypatch):
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_secret")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    # Two workers alone would not start a server (see the next tests); one already running serves them.
    server = process.fork_server_for(_cpu_launch(tmp_path))
    assert server is not None
    seen = _probe(tmp_path, quick_options)
    if NAMESPACES:  # the first process of its own PID namespace: it sees no parent
        assert seen["pid"] == 1 and seen["ppid"] == 0 and not seen["leader"]
        assert seen["uid"] > UID_BASE and not seen["bot_writable"]  # its own user: the bot's code is not its to change
    else:
        assert seen["ppid"] == server.proc.pid and seen["leader"]  # a fork of the server
    assert seen["secrets"] == 0
    assert seen["interp"] == "1"  # its own environment, not the server's
    assert seen["home"]  # its private working directory, also its HOME
    assert seen["iso"] == 1
    assert seen["sockets"] == 1  # its channel only, not the server's control socket
    assert seen["cap"]  # the CPU memory cap applies in the fork
    assert seen["compiler"]  # a CPU server imported torch.compile's machinery once, for every fork
    # and checked Inductor's vector instruction sets once: no fork compiles the test programs again
    assert server.vector_isa and seen["vector_isa"]
    assert seen["headers"] is False  # no precompiled header of its own to build (bot.sandbox.base)


def test_crashes_exits_and_forged_results_are_reported_through_the_server(quick_options):
    verdicts = _evaluate(["crash_segfault", "cheat_forge_stdout", "cheat_forge_fds", "honest"], quick_options)
    assert "killed by signal 11" in verdicts["crash_segfault"].reasons[0]
    assert any("exited with code 0 without a result" in r for r in verdicts["cheat_forge_stdout"].reasons)
    assert not verdicts["cheat_forge_fds"].accepted
    assert verdicts["honest"].accepted, verdicts["honest"].reasons


def test_switched_off_workers_start_as_fresh_processes(tmp_path, quick_options, monkeypatch):
    monkeypatch.setenv("KERNEL_BOT_FORK_SERVER", "0")
    seen = _probe(tmp_path, quick_options)
    server = process._servers.get((sys.executable, "cpu"))
    if NAMESPACES:
        assert seen["pid"] == 1 and seen["ppid"] == 0
    else:
        assert seen["ppid"] == os.getpid()  # started by the bot itself
        assert server is None or seen["ppid"] != server.proc.pid
    assert seen["sockets"] == 1 and seen["iso"] == 1 and seen["secrets"] == 0
    assert not seen["compiler"]  # a fresh worker imports it only for a candidate that compiles
    assert not seen["vector_isa"]


def test_a_few_workers_do_not_start_a_server_and_many_do(tmp_path, quick_options, monkeypatch):
    monkeypatch.setattr(process, "_servers", {})
    seen = _probe(tmp_path, quick_options)  # the reference and one candidate: two workers
    assert (sys.executable, "cpu") not in process._servers and not seen["compiler"]
    verdicts = _evaluate(["honest", "slow2x", "crash_segfault"], quick_options)  # four workers
    assert verdicts["honest"].accepted
    server = process._servers[(sys.executable, "cpu")]
    assert server is not None and server.proc.poll() is None
    server.close()


def test_a_dead_server_falls_back_to_fresh_processes(quick_options, monkeypatch, tmp_path):
    monkeypatch.setattr(process, "_servers", {})  # a server of this test's own
    server = process.fork_server_for(_cpu_launch(tmp_path))
    assert server is not None
    os.kill(server.proc.pid, signal.SIGKILL)
    server.proc.wait()
    verdicts = _evaluate(["honest", "crash_segfault"], quick_options)
    assert verdicts["honest"].accepted, verdicts["honest"].reasons
    assert "killed by signal 11" in verdicts["crash_segfault"].reasons[0]
    assert process._servers[(sys.executable, "cpu")] is None  # given up on, for the rest of the run


def test_the_server_holds_no_credentials_and_reports_a_vanished_worker(tmp_path):
    env = worker_env(_cpu_launch(tmp_path), {**os.environ, "GITHUB_TOKEN": "ghp_secret"})
    server = ForkServer(sys.executable, env)
    try:
        environ = Path(f"/proc/{server.proc.pid}/environ").read_bytes().split(b"\0")
        assert not any(v.startswith(b"GITHUB_TOKEN=") for v in environ)
        assert any(v.startswith(b"TRITON_INTERPRET=") for v in environ)
        assert server.exit_code(2**22 + 12345) is None  # not one of its workers: unknown, not dead
        server.close()
        assert server.exit_code(2**22 + 12345) == -9  # the server is gone and so is that process
    finally:
        server.close()


def test_confine_caps_the_address_space_of_a_cpu_worker():
    # In a fork, so the cap does not stay on the test process.
    pid = os.fork()
    if pid == 0:
        import resource

        isolate.confine(1024, "cpu", set())
        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        os._exit(0 if soft == (1024 + 4096) << 20 else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_a_server_that_cannot_start_leaves_workers_to_start_plainly(tmp_path, quick_options, monkeypatch):
    from bot.sandbox import fork_client

    monkeypatch.setattr(process, "_servers", {})
    monkeypatch.setattr(fork_client, "BOOT", "raise SystemExit('no torch here')")
    assert process.fork_server_for(_cpu_launch(tmp_path)) is None
    assert process._servers[(sys.executable, "cpu")] is None  # not tried again for every worker
    verdicts = _evaluate(["honest", "slow2x", "crash_segfault"], quick_options)
    assert verdicts["honest"].accepted, verdicts["honest"].reasons
    assert "killed by signal 11" in verdicts["crash_segfault"].reasons[0]


def test_the_compiler_import_leaves_the_cuda_probe_setting_as_it_found_it():
    code = (
        "import os, sys; from bot.sandbox.fork_server import _import_the_compiler; "
        "print(_import_the_compiler(), 'torch._inductor.compile_fx' in sys.modules, "
        "os.environ.get('PYTORCH_NVML_BASED_CUDA_CHECK'))"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTORCH_NVML_BASED_CUDA_CHECK"}
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**env, "PYTHONPATH": str(BOT_ROOT)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.split() == ["True", "True", "None"]


class _Driver:
    def __init__(self, answer: int):
        self.answer, self.asked = answer, 0

    def cuDeviceGetCount(self, _count):  # noqa: N802  the driver's own name
        self.asked += 1
        return self.answer


def test_the_driver_counts_as_initialised_only_when_it_answers_a_query():
    mapped = "7f00-7f01 r-xp 0 08:01 1 /usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04\n"
    loads = []

    def load(name, driver=None):
        loads.append(name)
        if driver is None:
            raise OSError("not found")
        return driver

    assert not cuda_driver_initialized("7f00-7f01 r-xp 0 08:01 1 /usr/lib/libc.so.6\n", load)
    assert loads == []  # not mapped: not loaded just to ask
    assert not cuda_driver_initialized(mapped, load)  # mapped but not loadable by that name
    before_cuinit = _Driver(3)  # CUDA_ERROR_NOT_INITIALIZED
    assert not cuda_driver_initialized(mapped, lambda name: load(name, before_cuinit))
    after_cuinit = _Driver(0)
    assert cuda_driver_initialized(mapped, lambda name: load(name, after_cuinit))
    assert before_cuinit.asked == after_cuinit.asked == 1


class _Nvml:
    """NVML's start count, as libnvidia-ml keeps it: each shutdown undoes one start."""

    def __init__(self, started: int):
        self.started = started

    def nvmlShutdown(self):  # noqa: N802  the library's own name
        if self.started == 0:
            return 1  # NVML_ERROR_UNINITIALIZED
        self.started -= 1
        return 0


def test_the_server_shuts_nvml_down_as_often_as_its_imports_started_it():
    # torch's NVML-based availability probe starts NVML and leaves it so; forks inherited it
    # started with its files closed, and on the H200 torch's out-of-memory report failed there.
    mapped = "7f00-7f01 r-xp 0 08:01 1 /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.580.159.04\n"
    twice = _Nvml(2)
    assert _shut_nvml_down(mapped, lambda name: twice) == 2 and twice.started == 0
    untouched = _Nvml(0)
    assert _shut_nvml_down(mapped, lambda name: untouched) == 0
    loads = []
    assert _shut_nvml_down("7f00-7f01 r-xp 0 08:01 1 /usr/lib/libc.so.6\n", loads.append) == 0
    assert loads == []  # not mapped: nothing loaded just to shut it down


# Stands in for a server whose compiler imports ran cuInit: it says so, as `serve` does.
DRIVER_TOUCHED_BOOT = (
    "import json, socket, sys; sys.path.insert(0, sys.argv[1])\n"
    "if sys.argv[3] == '1':\n"
    "    socket.socket(fileno=int(sys.argv[2])).sendall(json.dumps("
    "{'ready': False, 'driver_initialized': True, 'compiler': True}).encode())\n"
    "else:\n"
    "    from bot.sandbox.fork_server import serve; serve(int(sys.argv[2]), False)\n"
)


def test_a_server_whose_imports_initialised_the_driver_starts_again_without_the_compiler(
    tmp_path, quick_options, monkeypatch
):
    from bot.sandbox import fork_client

    monkeypatch.setattr(process, "_servers", {})
    monkeypatch.setattr(fork_client, "BOOT", DRIVER_TOUCHED_BOOT)
    server = process.fork_server_for(_cpu_launch(tmp_path))
    assert server is not None and not server.compiler
    seen = _probe(tmp_path, quick_options)
    assert seen["ppid"] == (0 if NAMESPACES else server.proc.pid)  # workers are still forks of it
    assert not seen["compiler"] and not seen["vector_isa"] and not server.vector_isa
    server.close()
