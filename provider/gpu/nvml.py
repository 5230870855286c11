"""The one place that calls NVML (nvidia-ml-py), so the real library and its stand-ins meet here.

Importable with only nvidia-ml-py and the standard library: GPU machines run it without the
rest of the project's dependencies.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pynvml

from offchain.core.errors import UnchainedError

NO_GPU = "no NVIDIA GPU/driver on this machine"


class NoGpu(UnchainedError, RuntimeError):
    """NVML cannot start (no driver, no library, no device): a normal case, CPU jobs still run."""


@contextmanager
def session() -> Iterator[None]:
    """NVML initialised for the block; NVML counts nested inits, so sessions may overlap."""
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise NoGpu(f"{NO_GPU} ({exc})") from exc
    try:
        yield
    finally:
        pynvml.nvmlShutdown()


def optional(call: Any, *args: Any) -> Any:
    """`call(*args)`, or None where this GPU does not support or cannot report it."""
    try:
        return call(*args)
    except (
        pynvml.NVMLError_NotSupported,
        pynvml.NVMLError_NoPermission,
        pynvml.NVMLError_NotFound,
    ):
        return None


def text(value: str | bytes) -> str:
    """Old wrappers return bytes, new ones str."""
    return value.decode() if isinstance(value, bytes) else value


def handles() -> list[Any]:
    return [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]


def handle_by_uuid(uuid: str) -> Any:
    return pynvml.nvmlDeviceGetHandleByUUID(uuid)


def cuda_version() -> str:
    """The CUDA version the driver supports, e.g. 12040 -> "12.4"."""
    number = pynvml.nvmlSystemGetCudaDriverVersion()
    return f"{number // 1000}.{number % 1000 // 10}"


def mig_mode(handle: Any) -> str:
    modes = optional(pynvml.nvmlDeviceGetMigMode, handle)
    if modes is None:
        return "unsupported"
    return "enabled" if modes[0] == pynvml.NVML_DEVICE_MIG_ENABLE else "disabled"


def compute_processes(handle: Any) -> list[tuple[int, int | None]]:
    """(host PID, GPU memory bytes or None) of every compute process on the device."""
    return [
        (proc.pid, proc.usedGpuMemory)
        for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
    ]


def process_utilization(handle: Any, since_us: int) -> list[tuple[int, int, int, int]]:
    """(PID, timestamp us, SM %, memory bandwidth %) samples newer than `since_us`; none when
    NVML has none.

    NVML answers NOT_FOUND when it holds no samples, and the wrapper raises NVMLError(0)
    (SUCCESS) when there is nothing to report; both mean "no samples".
    """
    try:
        samples = pynvml.nvmlDeviceGetProcessUtilization(handle, since_us)
    except pynvml.NVMLError as exc:
        if exc.value in (pynvml.NVML_SUCCESS, pynvml.NVML_ERROR_NOT_FOUND):
            return []
        if exc.value == pynvml.NVML_ERROR_NOT_SUPPORTED:  # MIG, older GPUs
            return []
        raise
    return [(s.pid, s.timeStamp, s.smUtil, s.memUtil) for s in samples]


def energy_mj(handle: Any) -> int | None:
    """Energy since the driver loaded, in millijoules (Volta and newer), else None."""
    return optional(pynvml.nvmlDeviceGetTotalEnergyConsumption, handle)


def index(handle: Any) -> int:
    return pynvml.nvmlDeviceGetIndex(handle)


def mig_instances(handle: Any) -> list[tuple[str, int]]:
    """(UUID, memory bytes) of each MIG instance made on a GPU in MIG mode (none made: [])."""
    found = []
    for i in range(optional(pynvml.nvmlDeviceGetMaxMigDeviceCount, handle) or 0):
        instance = optional(pynvml.nvmlDeviceGetMigDeviceHandleByIndex, handle, i)
        if instance is not None:
            memory = pynvml.nvmlDeviceGetMemoryInfo(instance).total
            found.append((text(pynvml.nvmlDeviceGetUUID(instance)), memory))
    return found


def accounting_stats(handle: Any, pid: int) -> tuple[int, int, int] | None:
    """(GPU %, memory bandwidth %, max memory bytes) the driver's accounting kept for `pid`
    over its life, or None where accounting is off (`nvidia-smi -am 1` turns it on) or has
    no record of the process."""
    if optional(pynvml.nvmlDeviceGetAccountingMode, handle) != pynvml.NVML_FEATURE_ENABLED:
        return None
    stats = optional(pynvml.nvmlDeviceGetAccountingStats, handle, pid)
    if stats is None:
        return None
    return (stats.gpuUtilization, stats.memoryUtilization, stats.maxMemoryUsage)
