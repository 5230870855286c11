"""A FAKE NVML, standing in for a GPU on machines without an NVIDIA driver (CI, this one): it
returns what nvidia-ml-py returns (its own ctypes structs and friendly objects) and raises its
real error classes. Nothing measured through it is a GPU measurement; the tests marked `gpu`
run the real path on a GPU machine."""

from __future__ import annotations

import pynvml
import pytest

H100 = "GPU-5a1c2b3d-0000-4000-8000-00000000h100"
A100 = "GPU-5a1c2b3d-0000-4000-8000-00000000a100"
MIG_1 = "MIG-5a1c2b3d-0000-4000-8000-000000mig001"
MIG_2 = "MIG-5a1c2b3d-0000-4000-8000-000000mig002"
JOB_PID, OTHER_PID = 4242, 999


def process(pid: int, used: int | None) -> pynvml.nvmlFriendlyObject:
    """What nvmlDeviceGetComputeRunningProcesses yields (usedGpuMemory None when unknown)."""
    info = pynvml.nvmlStructToFriendlyObject(
        pynvml.c_nvmlProcessInfo_v3_t(pid, used or 0, 0xFFFFFFFF, 0xFFFFFFFF)
    )
    info.usedGpuMemory = used
    return info


def utilization(
    pid: int, stamp_us: int, sm: int, memory_util: int = 10
) -> pynvml.c_nvmlProcessUtilizationSample_t:
    return pynvml.c_nvmlProcessUtilizationSample_t(pid, stamp_us, sm, memory_util, 0, 0)


def accounting(gpu: int, memory_util: int, max_memory: int) -> pynvml.c_nvmlAccountingStats_t:
    return pynvml.c_nvmlAccountingStats_t(gpu, memory_util, max_memory)


class FakeNvml:
    """A stand-in NVML with two GPUs: an H100 (MIG off, energy counter) and an A100 in MIG mode
    (no process utilization, no energy counter) with two MIG instances. Accounting is off
    until a test puts a GPU in `accounting` (PID -> stats)."""

    def __init__(self) -> None:
        self.devices = {
            H100: {"name": "NVIDIA H100 80GB HBM3", "memory": 85_520_809_984, "cc": (9, 0),
                   "mig": [pynvml.NVML_DEVICE_MIG_DISABLE] * 2, "energy": 1_000_000},
            A100: {"name": "NVIDIA A100-SXM4-40GB", "memory": 42_949_672_960, "cc": (8, 0),
                   "mig": [pynvml.NVML_DEVICE_MIG_ENABLE] * 2, "energy": None},
        }  # fmt: skip
        self.processes = {H100: [process(JOB_PID, 2 << 30), process(OTHER_PID, 1 << 30)], A100: []}
        self.samples: dict[str, list] = {H100: [], A100: []}
        self.mig_instances = {A100: [(MIG_1, 20 << 30), (MIG_2, 10 << 30)]}
        self.accounting: dict[str, dict[int, pynvml.c_nvmlAccountingStats_t]] = {}
        self.init_error: pynvml.NVMLError | None = None

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        def init() -> None:
            if self.init_error is not None:
                raise self.init_error

        def energy(uuid: str) -> int:
            if self.devices[uuid]["energy"] is None:
                raise pynvml.NVMLError_NotSupported()
            self.devices[uuid]["energy"] += 5_000  # 5 J between readings
            return self.devices[uuid]["energy"]

        def process_utilization(uuid: str, since_us: int) -> list:
            if self.devices[uuid]["mig"][0] == pynvml.NVML_DEVICE_MIG_ENABLE:
                raise pynvml.NVMLError_NotSupported()
            fresh = [s for s in self.samples[uuid] if s.timeStamp > since_us]
            if not self.samples[uuid]:
                raise pynvml.NVMLError_NotFound()  # NVML holds no samples yet
            if not fresh:
                raise pynvml.NVMLError(pynvml.NVML_SUCCESS)  # the wrapper's "nothing to report"
            return fresh

        def memory(handle: str | tuple[str, int]) -> pynvml.c_nvmlMemory_t:
            if isinstance(handle, tuple):  # a MIG instance
                return pynvml.c_nvmlMemory_t(self.mig_instances[handle[0]][handle[1]][1], 0, 0)
            return pynvml.c_nvmlMemory_t(self.devices[handle]["memory"], 0, 0)

        def mig_handle(uuid: str, i: int) -> tuple[str, int]:
            if i >= len(self.mig_instances.get(uuid, [])):
                raise pynvml.NVMLError_NotFound()  # no instance made in this place
            return (uuid, i)

        def uuid_of(handle: str | tuple[str, int]) -> str:
            if isinstance(handle, tuple):
                return self.mig_instances[handle[0]][handle[1]][0]
            return handle

        def accounting_stats(uuid: str, pid: int) -> pynvml.c_nvmlAccountingStats_t:
            if pid not in self.accounting.get(uuid, {}):
                raise pynvml.NVMLError_NotFound()
            return self.accounting[uuid][pid]

        enabled, disabled = pynvml.NVML_FEATURE_ENABLED, pynvml.NVML_FEATURE_DISABLED
        fakes = {
            "nvmlInit": init,
            "nvmlShutdown": lambda: None,
            "nvmlDeviceGetCount": lambda: len(self.devices),
            "nvmlDeviceGetHandleByIndex": lambda i: list(self.devices)[i],
            "nvmlDeviceGetHandleByUUID": lambda uuid: uuid,
            "nvmlDeviceGetUUID": uuid_of,
            "nvmlDeviceGetIndex": lambda uuid: list(self.devices).index(uuid),
            "nvmlDeviceGetMaxMigDeviceCount": lambda uuid: 7 if uuid in self.mig_instances else 0,
            "nvmlDeviceGetMigDeviceHandleByIndex": mig_handle,
            "nvmlDeviceGetAccountingMode": lambda u: enabled if u in self.accounting else disabled,
            "nvmlDeviceGetAccountingStats": accounting_stats,
            "nvmlDeviceGetName": lambda uuid: self.devices[uuid]["name"],
            "nvmlDeviceGetMemoryInfo": memory,
            "nvmlDeviceGetCudaComputeCapability": lambda uuid: self.devices[uuid]["cc"],
            "nvmlDeviceGetMigMode": lambda uuid: self.devices[uuid]["mig"],
            "nvmlSystemGetDriverVersion": lambda: "550.54.15",
            "nvmlSystemGetCudaDriverVersion": lambda: 12040,
            "nvmlDeviceGetComputeRunningProcesses": lambda uuid: self.processes[uuid],
            "nvmlDeviceGetProcessUtilization": process_utilization,
            "nvmlDeviceGetTotalEnergyConsumption": energy,
        }
        for name, fake in fakes.items():
            monkeypatch.setattr(pynvml, name, fake)


@pytest.fixture
def fake_nvml(monkeypatch) -> FakeNvml:
    fake = FakeNvml()
    fake.install(monkeypatch)
    return fake
