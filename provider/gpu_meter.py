"""Per-GPU samples of one job's processes: GPU memory, SM utilization and the energy delta.

NVML reports host PIDs; a process counts for the job when its cgroup (`/proc/<pid>/cgroup`)
lies under the job's cgroup, so the daemon must see the host PID namespace. These numbers are
evidence for the receipt, never the price basis: the job pays for the reserved GPU-seconds.
Standard library and nvidia-ml-py only.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from offchain.protocol.metering import GpuSample, GpuUsage
from provider import nvml


@dataclass
class _Device:
    uuid: str
    handle: Any
    energy_start: int | None
    last_seen_us: int
    memory_peak: int = 0
    sm_peak: int | None = None
    pids: set[int] = field(default_factory=set)

    def energy_delta(self) -> int | None:
        energy = nvml.energy_mj(self.handle)
        return None if energy is None or self.energy_start is None else energy - self.energy_start


class GpuMeter:
    """Samples the job's GPUs; use as a context manager (it holds an NVML session)."""

    def __init__(self, uuids: list[str], belongs: Callable[[int], bool]) -> None:
        self.uuids = list(uuids)
        self.belongs = belongs
        self.devices: list[_Device] = []
        self._membership: dict[int, bool] = {}
        self._session = nvml.session()

    def __enter__(self) -> GpuMeter:
        self._session.__enter__()
        now_us = time.time_ns() // 1000  # NVML stamps samples in host microseconds
        for uuid in self.uuids:
            handle = nvml.handle_by_uuid(uuid)
            self.devices.append(_Device(uuid, handle, nvml.energy_mj(handle), now_us))
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
        for pid, stamp, sm_percent in nvml.process_utilization(device.handle, device.last_seen_us):
            device.last_seen_us = max(device.last_seen_us, stamp)
            if self._is_job_pid(pid):
                sm = max(sm or 0, sm_percent)
        device.memory_peak = max(device.memory_peak, memory)
        if sm is not None:
            device.sm_peak = max(device.sm_peak or 0, sm)
        return GpuSample(t_ms, device.uuid, memory, sm, device.energy_delta())

    def usage(self) -> list[GpuUsage]:
        """Totals per GPU: a final energy reading, and the peaks the samples saw."""
        return [
            GpuUsage(d.uuid, d.energy_delta(), d.memory_peak, d.sm_peak, len(d.pids))
            for d in self.devices
        ]
