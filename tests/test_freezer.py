"""While one contender is timed the others are frozen, children included; the reference never is."""

from __future__ import annotations

import statistics
import time

import pytest
from conftest import PROBLEMS

from bot.engine.workers.client import WorkerClient
from bot.sandbox import Limits, WorkerLaunch, freezer
from bot.sandbox.contained import containment
from bot.sandbox.process import ProcessSandbox

# At import: a child that burns CPU for as long as it is let run.
BURNER = """
import os
if os.fork() == 0:
    while True:
        pass
from honest_module import *
"""


def _sandbox(name: str):
    if name == "docker":
        from bot.sandbox.docker import DockerSandbox

        return DockerSandbox()
    return ProcessSandbox(start_fork_server=False)


def _client(tmp_path, label: str, module, sandbox) -> WorkerClient:
    client = WorkerClient(
        sandbox,
        label,
        WorkerLaunch(
            workdir=tmp_path / f"w-{label}",
            cache_dir=tmp_path / "cache",
            readable=(PROBLEMS / "scale_add.py", PROBLEMS, module),
            device="cpu",
            limits=Limits(memory_mb=4096),
        ),
        threads=1,
    )
    client.request(
        {
            "op": "load",
            "problem": str(PROBLEMS / "scale_add.py"),
            "module": str(module),
            "class_name": "ModelNew",
            "precision": "native",
        },
        120,
        "import",
    )
    return client


def _cpu_in(client: WorkerClient, seconds: float) -> float:
    before = client.running.cpu_seconds()
    time.sleep(seconds)
    return client.running.cpu_seconds() - before


@pytest.mark.parametrize(
    "backend",
    [
        pytest.param(
            "process",
            marks=pytest.mark.skipif(
                not containment().cgroups, reason=f"containment here is {containment().description}"
            ),
        ),
        pytest.param("docker", marks=pytest.mark.docker),
    ],
)
def test_frozen_workers_and_their_children_do_not_run_and_the_reference_is_never_frozen(tmp_path, backend):
    sandbox = _sandbox(backend)
    module = tmp_path / "burner.py"
    module.write_text(
        BURNER.replace("from honest_module import *", (PROBLEMS.parent / "candidates" / "honest.py").read_text())
    )
    reference, burner, other = (_client(tmp_path, name, module, sandbox) for name in ("reference", "burner", "other"))
    try:
        assert _cpu_in(burner, 1.0) > 0.05  # its child burns CPU (2 shared cores: a share)
        with freezer.timing_phase() as phase:
            phase.only(other)
            assert burner.running.frozen and not reference.running.frozen and not other.running.frozen
            assert _cpu_in(burner, 0.5) < 0.01  # the whole tree stopped
            assert _cpu_in(reference, 1.0) > 0.05  # trusted: runs on
            switches = []
            for _ in range(20):  # a batch of each in turn: thaw one, freeze one
                began = time.perf_counter()
                phase.only(burner if len(switches) % 2 == 0 else other)
                switches.append(time.perf_counter() - began)
            print(
                f"{backend}: freeze_all_but per batch: median {statistics.median(switches) * 1e3:.2f} ms, "
                f"max {max(switches) * 1e3:.2f} ms"
            )
            assert statistics.median(switches) < (0.02 if backend == "process" else 0.2)
        assert not burner.running.frozen and not other.running.frozen
        assert _cpu_in(burner, 1.0) > 0.05  # thawed when the phase ended
        burner.running.freeze()
        time.sleep(0.3)
        assert burner.request({"op": "release"}, 5, "release")["ok"]  # asked to work: thawed
        assert not burner.running.frozen and burner.running.frozen_seconds() >= 0.3
    finally:
        for client in (reference, burner, other):
            client.close()
    assert freezer.live() == []


def test_without_root_the_containment_says_so_loudly(monkeypatch, caplog):
    from bot.sandbox import contained

    monkeypatch.setattr(contained, "run_tree", lambda: (None, "/sys/fs/cgroup is not writable (not root)"))
    monkeypatch.setattr(contained, "probe", lambda: "not root")
    with caplog.at_level("WARNING"):
        mode = contained.containment.__wrapped__()
    assert not (mode.cgroups or mode.namespaces or mode.uid)
    assert mode.description == "none: /sys/fs/cgroup is not writable (not root); not root"
    assert any("containment is none" in r.getMessage() for r in caplog.records)


@pytest.mark.skipif(not containment().cgroups, reason=f"containment here is {containment().description}")
def test_time_spent_frozen_counts_toward_neither_the_timeout_nor_the_stall_bound(tmp_path):
    import threading

    module = tmp_path / "busy_import.py"
    module.write_text(
        "import time\nend = time.monotonic() + 1.0\nwhile time.monotonic() < end:\n    pass\n"
        + (PROBLEMS.parent / "candidates" / "honest.py").read_text()
    )
    client = WorkerClient(
        _sandbox("process"),
        "frozen-mid-request",
        WorkerLaunch(
            workdir=tmp_path / "w",
            cache_dir=tmp_path / "cache",
            readable=(PROBLEMS / "scale_add.py", PROBLEMS, module),
            device="cpu",
            limits=Limits(memory_mb=4096, stall_timeout_s=3.0),
        ),
        threads=1,
    )

    def freeze_for_a_while():
        time.sleep(0.3)
        client.running.freeze()
        time.sleep(7.0)  # longer than the request's 6 s and the 3 s stall bound
        client.running.thaw()

    helper = threading.Thread(target=freeze_for_a_while)
    try:
        began = time.monotonic()
        helper.start()
        reply = client.request(
            {
                "op": "load",
                "problem": str(PROBLEMS / "scale_add.py"),
                "module": str(module),
                "class_name": "ModelNew",
                "precision": "native",
            },
            6.0,
            "import",
        )
        assert reply["ok"] and time.monotonic() - began > 7.0
        assert client.running.frozen_seconds() >= 6.9
    finally:
        helper.join()
        client.close()
