"""What this machine has to offer: GPUs from NVML, CPU cores, memory and disk.

Standard library and nvidia-ml-py only, so it runs on a bare GPU machine. No GPU or no driver
is a normal answer: the inventory says why and lists no GPUs, and CPU jobs are still offered.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pynvml

from provider.gpu import nvml


@dataclass(frozen=True)
class GpuInfo:
    index: int
    uuid: str
    name: str
    memory_bytes: int
    compute_capability: str
    mig_mode: str  # enabled | disabled | unsupported


@dataclass(frozen=True)
class GpuInventory:
    gpus: tuple[GpuInfo, ...] = ()
    driver_version: str | None = None
    cuda_version: str | None = None
    note: str = ""  # why there are no GPUs, when there are none


@dataclass(frozen=True)
class HostInventory:
    cpu_cores: int
    memory_bytes: int
    disk_total_bytes: int
    disk_free_bytes: int
    gpu: GpuInventory = field(default_factory=GpuInventory)


def gpu_info(index: int, handle: object) -> GpuInfo:
    major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
    return GpuInfo(
        index=index,
        uuid=nvml.text(pynvml.nvmlDeviceGetUUID(handle)),
        name=nvml.text(pynvml.nvmlDeviceGetName(handle)),
        memory_bytes=pynvml.nvmlDeviceGetMemoryInfo(handle).total,
        compute_capability=f"{major}.{minor}",
        mig_mode=nvml.mig_mode(handle),
    )


def gpu_inventory() -> GpuInventory:
    """Every GPU NVML sees; an empty inventory with the reason when NVML cannot start."""
    try:
        with nvml.session():
            gpus = tuple(gpu_info(i, handle) for i, handle in enumerate(nvml.handles()))
            if not gpus:
                return GpuInventory(note=f"{nvml.NO_GPU} (NVML found no devices)")
            driver = nvml.text(pynvml.nvmlSystemGetDriverVersion())
            return GpuInventory(gpus, driver, nvml.cuda_version())
    except nvml.NoGpu as exc:
        return GpuInventory(note=str(exc))


def host_inventory(disk_path: Path) -> HostInventory:
    """The whole machine; disk is the filesystem that holds `disk_path` (the runner's state)."""
    probe = disk_path if disk_path.exists() else Path(os.path.abspath(disk_path)).anchor
    disk = shutil.disk_usage(probe)
    return HostInventory(
        cpu_cores=len(os.sched_getaffinity(0)),
        memory_bytes=os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
        disk_total_bytes=disk.total,
        disk_free_bytes=disk.free,
        gpu=gpu_inventory(),
    )
