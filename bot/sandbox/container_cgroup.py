"""A docker container's processes, threads and CPU time, read from its cgroups on the host."""

from __future__ import annotations

import time
from pathlib import Path

from bot.sandbox.cgroup import Leaf, cgroup2_mount


class ContainerCgroup:
    """A container's processes, threads and CPU time from its cgroups (v2, or v1 pids and
    cpuacct where the engine uses the legacy hierarchies)."""

    def __init__(self, procs: Path, cpu_file: Path, v2: bool, freezer: Path | None = None):
        self.procs, self.cpu_file, self.v2 = procs, cpu_file, v2
        self.freezer = freezer  # v1: the freezer controller's folder

    @staticmethod
    def of(pid: int) -> ContainerCgroup | None:
        try:
            lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
        except OSError:
            return None
        paths = {}
        for line in lines:
            _, controllers, path = line.split(":", 2)
            for name in controllers.split(",") if controllers else [""]:
                paths[name] = path
        if paths.get("pids", "/") != "/" and paths.get("cpuacct", "/") != "/":
            freezer = Path("/sys/fs/cgroup/freezer" + paths["freezer"]) if "freezer" in paths else None
            return ContainerCgroup(
                Path("/sys/fs/cgroup/pids" + paths["pids"]),
                Path("/sys/fs/cgroup/cpuacct" + paths["cpuacct"]) / "cpuacct.usage",
                False,
                freezer,
            )
        root = cgroup2_mount()
        if root is not None and paths.get("", "/") != "/":
            folder = root / paths[""].lstrip("/")
            return ContainerCgroup(folder, folder / "cpu.stat", True)
        return None

    def pids(self) -> list[int]:
        return Leaf(self.procs).pids()

    def thread_count(self) -> int | None:
        try:
            return len((self.procs / ("cgroup.threads" if self.v2 else "tasks")).read_text().split())
        except OSError:
            return None

    def cpu_seconds(self) -> float | None:
        if self.v2:
            return Leaf(self.procs).cpu_seconds()
        try:
            return int(self.cpu_file.read_text()) / 1e9
        except (OSError, ValueError):
            return None

    def set_frozen(self, frozen: bool) -> bool:
        """Freeze or thaw the container through its cgroup (the engine's pause takes ~50 ms a
        call, this well under one); False where there is no freezer to write."""
        if self.v2:
            Leaf(self.procs).set_frozen(frozen)
            return True
        if self.freezer is None:
            return False
        want = "FROZEN" if frozen else "THAWED"
        try:
            (self.freezer / "freezer.state").write_text(want)
            deadline = time.monotonic() + 5.0
            while (self.freezer / "freezer.state").read_text().strip() != want and time.monotonic() < deadline:
                time.sleep(0.0002)
        except OSError:
            return False
        return True
