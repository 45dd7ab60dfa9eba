"""The pieces of containment on their own: the secret scrub, and the sweep of dead bots' cgroups."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from bot.sandbox.cgroup import TOP, Leaf, cgroup2_mount, pids_v1_mount, sweep_dead_runs
from bot.sandbox.contained import containment
from bot.sandbox.scrub import REDACTED, scrub, secret_values


def test_scrub_redacts_secret_values_everywhere_and_nothing_else():
    environ = {
        "GITHUB_TOKEN": "ghp_abcdef123456",
        "OPENAI_API_KEY": "sk-987654321",
        "FLAG_KEY": "1",
        "PATH": "/usr/bin",
    }
    found = secret_values(environ)
    assert set(found) == {"ghp_abcdef123456", "sk-987654321"}  # "1" is too short to redact
    reply = {
        "error": "got ghp_abcdef123456",
        "nested": [("sk-987654321",), {"sk-987654321": 1.5}],
        "n": 3,
        "path": "/usr/bin",
    }
    clean = scrub(reply, found)
    assert clean == {"error": f"got {REDACTED}", "nested": [(REDACTED,), {REDACTED: 1.5}], "n": 3, "path": "/usr/bin"}


@pytest.mark.skipif(not containment().cgroups, reason=f"containment here is {containment().description}")
def test_a_dead_bots_subtree_is_killed_and_removed_and_a_live_ones_kept():
    top = cgroup2_mount() / TOP
    dead_pid = subprocess.Popen(["true"])
    dead_pid.wait()  # a pid that no longer exists
    dead = top / f"{dead_pid.pid}-deadbeef" / "w0"
    live = top / f"{os.getpid()}-livebeef"
    dead.mkdir(parents=True)
    live.mkdir()
    orphan = subprocess.Popen(["sleep", "300"])
    try:
        (dead / "cgroup.procs").write_text(str(orphan.pid))
        assert Leaf(dead).pids() == [orphan.pid]
        removed = sweep_dead_runs(top)
        assert dead.parent in removed and not dead.parent.exists()
        deadline = time.monotonic() + 5
        while orphan.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert orphan.returncode == -9  # killed with the subtree
        assert live.exists()
    finally:
        orphan.kill()
        orphan.wait()
        live.rmdir()


def test_the_pids_controller_is_found_in_v2_or_v1_as_the_host_mounts_it():
    hybrid = (
        "cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0\n"
        "cgroup /sys/fs/cgroup/pids cgroup rw,nosuid,relatime,pids 0 0\n"
        "cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0\n"
    )
    assert cgroup2_mount(hybrid) == Path("/sys/fs/cgroup/unified")
    assert pids_v1_mount(hybrid) == Path("/sys/fs/cgroup/pids")
    unified = "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime 0 0\n"
    assert cgroup2_mount(unified) == Path("/sys/fs/cgroup") and pids_v1_mount(unified) is None
    assert pids_v1_mount("cgroup /sys/fs/cgroup/cpu cgroup rw,cpu,cpuacct 0 0\n") is None
