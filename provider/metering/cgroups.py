"""A job's parent cgroup: where its exact CPU time, peak memory and peak PIDs outlive the container.

Docker puts the container in `cgroup_parent`; the kernel charges the container's usage to that
parent as well, and the parent stays when the container's own cgroup is removed at exit. The
runner reads it during the run (10 Hz, from files: cheap) and once after exit (exact totals),
then removes it. cgroup v1 (cgroupfs driver) and v2 are both read; standard library only.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

BASE = "unchained"
JOB_ID = re.compile(r"[a-z0-9][a-z0-9_]{0,63}")  # safe in cgroup, container and file names


@dataclass(frozen=True)
class Hierarchy:
    mountpoint: Path
    root: str  # the cgroup path mounted there ("/" on the host)
    controllers: frozenset[str]  # empty for v2

    def directory(self, cgroup_path: str) -> Path | None:
        """Where `cgroup_path` lives in this mount, or None when the mount cannot see it."""
        root = self.root.rstrip("/")
        if cgroup_path != root and not cgroup_path.startswith(root + "/"):
            return None
        return self.mountpoint / cgroup_path[len(root) :].lstrip("/")


@dataclass(frozen=True)
class CgroupFs:
    version: int
    hierarchies: tuple[Hierarchy, ...]

    def controller(self, name: str) -> Hierarchy:
        """The hierarchy holding controller `name` (v2: the one unified hierarchy)."""
        for hierarchy in self.hierarchies:
            if (self.version == 2 and not hierarchy.controllers) or name in hierarchy.controllers:
                return hierarchy
        raise RuntimeError(f"no cgroup hierarchy with the {name} controller is mounted")


def parse_mountinfo(text: str) -> CgroupFs:
    """The cgroup hierarchies in /proc/self/mountinfo; v1 when the cpuacct controller is mounted."""
    hierarchies = []
    for line in text.splitlines():
        fields = line.split()
        dash = fields.index("-")
        fstype, super_options = fields[dash + 1], fields[dash + 3]
        if fstype == "cgroup":
            controllers = frozenset(o for o in super_options.split(",") if o not in ("rw", "ro"))
        elif fstype == "cgroup2":
            controllers = frozenset()
        else:
            continue
        hierarchies.append(Hierarchy(Path(fields[4]), fields[3], controllers))
    version = 1 if any("cpuacct" in h.controllers for h in hierarchies) else 2
    return CgroupFs(version, tuple(hierarchies))


@functools.cache
def cgroup_fs() -> CgroupFs:
    return parse_mountinfo(Path("/proc/self/mountinfo").read_text())


def read_int(path: Path) -> int:
    return int(path.read_text())


def read_key(path: Path, key: str) -> int:
    """One `key value` line of a flat-keyed file (cpu.stat, memory.events)."""
    for line in path.read_text().splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            return int(value)
    raise KeyError(f"{key} not in {path}")


def cgroup_of(pid: int, fs: CgroupFs | None = None) -> str | None:
    """The cgroup of host process `pid` in the accounting hierarchy; None once it has exited."""
    fs = fs or cgroup_fs()
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except (FileNotFoundError, ProcessLookupError):
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        v1_accounting = fs.version == 1 and "cpuacct" in controllers.split(",")
        if v1_accounting or (fs.version == 2 and not controllers):
            return path
    return None


class JobCgroup:
    """The parent cgroup of one job's container, `unchained/<runner>_<job>`: flat, so nothing
    but the job's own directory is ever made or left, and runners sharing a machine never meet."""

    def __init__(
        self, runner_id: str, job_id: str, systemd: bool = False, fs: CgroupFs | None = None
    ) -> None:
        for name, value in (("runner id", runner_id), ("job id", job_id)):
            if not JOB_ID.fullmatch(value):
                raise ValueError(f"{name} {value!r} must match {JOB_ID.pattern}")
        self.fs = fs or cgroup_fs()
        if systemd:  # the systemd driver wants a slice; "a-b.slice" nests inside "a.slice"
            self.docker_parent = f"{BASE}-{runner_id}_{job_id}.slice"
            self.path = f"/{BASE}.slice/{self.docker_parent}"
        else:
            self.docker_parent = self.path = f"/{BASE}/{runner_id}_{job_id}"
        self._files = self._counter_files()

    def _counter_files(self) -> dict[str, Path]:
        def file(controller: str, name: str) -> Path:
            directory = self.fs.controller(controller).directory(self.path)
            if directory is None:
                raise RuntimeError(f"cgroup {self.path} is outside the mounted {controller} tree")
            return directory / name

        if self.fs.version == 1:
            return {
                "cpu": file("cpuacct", "cpuacct.usage"),
                "memory": file("memory", "memory.usage_in_bytes"),
                "memory_peak": file("memory", "memory.max_usage_in_bytes"),
                "pids": file("pids", "pids.current"),
                "pids_peak": file("pids", "pids.peak"),
            }
        return {
            "cpu": file("cpu", "cpu.stat"),
            "memory": file("memory", "memory.current"),
            "memory_peak": file("memory", "memory.peak"),
            "pids": file("pids", "pids.current"),
            "pids_peak": file("pids", "pids.peak"),
        }

    def exists(self) -> bool:
        return self._files["cpu"].parent.is_dir()

    def cpu_ns(self) -> int:
        """CPU time of everything that ever ran in the job, in nanoseconds."""
        if self.fs.version == 1:
            return read_int(self._files["cpu"])
        return read_key(self._files["cpu"], "usage_usec") * 1000

    def memory_bytes(self) -> int:
        return read_int(self._files["memory"])

    def memory_peak_bytes(self) -> int:
        return read_int(self._files["memory_peak"])

    def pids(self) -> int:
        return read_int(self._files["pids"])

    def pids_peak(self) -> int | None:
        """Most tasks at once (kernels from 6.8 keep it); None where the kernel has no pids.peak."""
        try:
            return read_int(self._files["pids_peak"])
        except FileNotFoundError:
            return None

    def contains_pid(self, pid: int) -> bool:
        """Whether host process `pid` runs in this job (NVML reports host PIDs)."""
        path = cgroup_of(pid, self.fs)
        return path is not None and (path == self.path or path.startswith(self.path + "/"))

    def remove(self) -> None:
        """Remove the job's cgroup (and any leftover children) from every hierarchy."""
        for hierarchy in self.fs.hierarchies:
            top = hierarchy.directory(self.path)
            if top is None or not top.is_dir():
                continue
            for directory, _, _ in sorted(os.walk(top), key=lambda e: -len(e[0])):
                os.rmdir(directory)


def job_ids(runner_id: str, systemd: bool = False, fs: CgroupFs | None = None) -> list[str]:
    """Jobs of this runner that still have a cgroup (left by a crash, for example)."""
    fs = fs or cgroup_fs()
    directory = fs.controller("memory").directory(f"/{BASE}.slice" if systemd else f"/{BASE}")
    if directory is None or not directory.is_dir():
        return []
    prefix, suffix = (f"{BASE}-{runner_id}_", ".slice") if systemd else (f"{runner_id}_", "")
    names = [e.name for e in directory.iterdir() if e.name.startswith(prefix)]
    return sorted(name.removeprefix(prefix).removesuffix(suffix) for name in names)


def in_any_job(pid: int, containers: Collection[str] = (), fs: CgroupFs | None = None) -> bool:
    """Whether host process `pid` runs in some job's container (any runner's) or in one of
    `containers` (full ids: services' and pods', which have no job cgroup): a GPU process that
    does not is the operator's own work."""
    path = cgroup_of(pid, fs)
    if path is None:
        return False
    return path.startswith((f"/{BASE}/", f"/{BASE}.slice/")) or any(c in path for c in containers)
