"""Per-GPU samples of one job's processes: GPU memory, SM and memory-bandwidth utilization,
accounting stats where the driver keeps them, and (on a whole GPU) the energy delta.

NVML reports host PIDs; a process counts for the job when its cgroup (`/proc/<pid>/cgroup`)
lies under the job's cgroup, so the daemon must see the host PID namespace. On a shared GPU
(a slice) only the job's processes are counted and the device's energy is left out: it is
every tenant's and the operator's. Processes in no job's container are the operator's own
work (`gpu_processes`): shown to the provider, never billed. These numbers are evidence for the
receipt, never the price basis: the job pays for the reserved seconds.
Standard library and nvidia-ml-py only.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from offchain.protocol.job.metering import GpuSample, GpuShare, GpuUsage
from provider.gpu import nvml

RECENT_US = 2_000_000  # a snapshot's utilization: the samples of the last two seconds


def _peak(old: int | None, new: int | None) -> int | None:
    return old if new is None else max(old or 0, new)


@dataclass
class _Device:
    uuid: str
    handle: Any
    energy_start: int | None
    last_seen_us: int
    memory_peak: int = 0
    sm_peak: int | None = None
    memory_util_peak: int | None = None
    pids: set[int] = field(default_factory=set)

    def energy_delta(self) -> int | None:
        energy = nvml.energy_mj(self.handle)
        return None if energy is None or self.energy_start is None else energy - self.energy_start


class GpuMeter:
    """Samples the job's GPUs; use as a context manager (it holds an NVML session). `shared`:
    the job has a slice of the GPU, so the device's energy is not its own and is not reported."""

    def __init__(
        self, uuids: list[str], belongs: Callable[[int], bool], shared: bool = False
    ) -> None:
        self.uuids = list(uuids)
        self.belongs = belongs
        self.shared = shared
        self.devices: list[_Device] = []
        self._membership: dict[int, bool] = {}
        self._session = nvml.session()

    def __enter__(self) -> GpuMeter:
        self._session.__enter__()
        now_us = time.time_ns() // 1000  # NVML stamps samples in host microseconds
        for uuid in self.uuids:
            handle = nvml.handle_by_uuid(uuid)
            energy = None if self.shared else nvml.energy_mj(handle)
            self.devices.append(_Device(uuid, handle, energy, now_us))
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._session.__exit__(kind, error, trace)

    def _is_job_pid(self, pid: int) -> bool:
        """Cached: a PID's cgroup does not change while the job runs."""
        if pid not in self._membership:
            self._membership[pid] = self.belongs(pid)
        return self._membership[pid]

    def sample(self, t_ms: int) -> list[GpuSample]:
        return [self._sample_device(device, t_ms) for device in self.devices]

    def _sample_device(self, device: _Device, t_ms: int) -> GpuSample:
        memory = 0
        for pid, used in nvml.compute_processes(device.handle):
            if self._is_job_pid(pid):
                device.pids.add(pid)
                memory += used or 0
        sm = None
        for pid, stamp, sm_percent, memory_util in nvml.process_utilization(
            device.handle, device.last_seen_us
        ):
            device.last_seen_us = max(device.last_seen_us, stamp)
            if self._is_job_pid(pid):
                sm = max(sm or 0, sm_percent)
                device.memory_util_peak = max(device.memory_util_peak or 0, memory_util)
        device.memory_peak = max(device.memory_peak, memory)
        device.sm_peak = _peak(device.sm_peak, sm)
        energy = None if self.shared else device.energy_delta()
        return GpuSample(t_ms, device.uuid, memory, sm, energy)

    def usage(self) -> list[GpuUsage]:
        """Totals per GPU: a final energy reading, and the peaks the samples saw."""
        return [
            GpuUsage(
                d.uuid,
                None if self.shared else d.energy_delta(),
                d.memory_peak,
                d.sm_peak,
                len(d.pids),
            )
            for d in self.devices
        ]

    def share(self, isolation: str, memory_mib: int, sm_percent: int) -> GpuShare:
        """The job's share of its slice (the meter's one device): what its processes used,
        with the driver's accounting of them where it is enabled."""
        (device,) = self.devices
        gpu_percent: int | None = None
        memory_peak: int | None = None
        for pid in sorted(device.pids):
            stats = nvml.accounting_stats(device.handle, pid)
            if stats is not None:
                gpu_percent = _peak(gpu_percent, stats[0])
                memory_peak = _peak(memory_peak, stats[2])
        return GpuShare(
            uuid=device.uuid,
            isolation=isolation,
            memory_mib=memory_mib,
            sm_percent=sm_percent,
            memory_util_peak=device.memory_util_peak,
            accounting_gpu_percent=gpu_percent,
            accounting_memory_peak_bytes=memory_peak,
        )


@dataclass(frozen=True)
class GpuProcess:
    """One compute process on a GPU at a moment: a job's, or the operator's own."""

    uuid: str
    pid: int
    memory_bytes: int
    sm_percent: int | None  # busiest sample of the last two seconds; None: no sample
    job: bool  # False: in no job's container, so the operator's (metered, not billed)


def gpu_processes(uuids: list[str], is_job: Callable[[int], bool]) -> list[GpuProcess]:
    """Every compute process on the GPUs now, each marked a job's or the operator's."""
    since_us = time.time_ns() // 1000 - RECENT_US
    found = []
    with nvml.session():
        for uuid in uuids:
            handle = nvml.handle_by_uuid(uuid)
            recent: dict[int, int] = {}
            for pid, _, sm_percent, _ in nvml.process_utilization(handle, since_us):
                recent[pid] = max(recent.get(pid, 0), sm_percent)
            for pid, used in nvml.compute_processes(handle):
                found.append(GpuProcess(uuid, pid, used or 0, recent.get(pid), is_job(pid)))
    return found
