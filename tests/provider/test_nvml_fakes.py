"""NVML code against FAKES STANDING IN FOR A GPU: this machine has no NVIDIA driver. The fakes
return what nvidia-ml-py returns (its own ctypes structs and friendly objects) and raise its
real error classes; tests marked `gpu` (test_gpu.py) run the real path on a GPU machine."""

from __future__ import annotations

import pynvml
import pytest

from offchain.protocol.job.metering import GpuSample, GpuUsage
from provider.gpu import nvml
from provider.gpu.inventory import GpuInfo, gpu_inventory
from provider.metering.gpu import GpuMeter
from tests.provider.fake_nvml import A100, H100, JOB_PID, OTHER_PID, process, utilization


def test_fake_inventory_lists_each_gpu_with_its_properties(fake_nvml):
    inventory = gpu_inventory()
    assert inventory.driver_version == "550.54.15" and inventory.cuda_version == "12.4"
    assert inventory.gpus == (
        GpuInfo(0, H100, "NVIDIA H100 80GB HBM3", 85_520_809_984, "9.0", "disabled"),
        GpuInfo(1, A100, "NVIDIA A100-SXM4-40GB", 42_949_672_960, "8.0", "enabled"),
    )
    assert inventory.note == ""


@pytest.mark.parametrize(
    "error",
    [pynvml.NVMLError_LibraryNotFound(), pynvml.NVMLError_DriverNotLoaded(),
     pynvml.NVMLError_NoPermission()],
)  # fmt: skip
def test_fake_nvml_that_cannot_start_means_no_gpu_not_a_crash(fake_nvml, error):
    fake_nvml.init_error = error
    inventory = gpu_inventory()
    assert inventory.gpus == () and inventory.driver_version is None
    assert inventory.note == f"{nvml.NO_GPU} ({error})"


def test_fake_nvml_with_no_devices_says_so(fake_nvml):
    fake_nvml.devices.clear()
    assert gpu_inventory().note == f"{nvml.NO_GPU} (NVML found no devices)"


def test_fake_gpu_without_mig_support_reports_it(fake_nvml, monkeypatch):
    def unsupported(handle):
        raise pynvml.NVMLError_NotSupported()

    monkeypatch.setattr(pynvml, "nvmlDeviceGetMigMode", unsupported)
    assert {gpu.mig_mode for gpu in gpu_inventory().gpus} == {"unsupported"}


def test_fake_gpu_meter_counts_only_the_jobs_processes(fake_nvml):
    fake_nvml.samples[H100] = [
        utilization(JOB_PID, 10**16, 87),
        utilization(OTHER_PID, 10**16 + 1, 99),  # another tenant's process: not this job's
    ]
    with GpuMeter([H100], belongs=lambda pid: pid == JOB_PID) as meter:
        first = meter.sample(100)
        second = meter.sample(200)  # no new utilization samples: NVMLError(0) from the wrapper
        usage = meter.usage()
    assert first == [GpuSample(100, H100, 2 << 30, 87, 5_000)]
    assert second == [GpuSample(200, H100, 2 << 30, None, 10_000)]
    assert usage == [GpuUsage(H100, 15_000, 2 << 30, 87, 1)]


def test_fake_gpu_meter_before_nvml_has_samples_and_without_memory_figures(fake_nvml):
    fake_nvml.processes[H100] = [process(JOB_PID, None)]  # usedGpuMemory not available
    with GpuMeter([H100], belongs=lambda pid: pid == JOB_PID) as meter:
        (sample,) = meter.sample(0)  # NVML_ERROR_NOT_FOUND: no samples yet
    assert (sample.memory_bytes, sample.sm_percent) == (0, None)


def test_fake_mig_gpu_has_no_utilization_and_no_energy(fake_nvml):
    fake_nvml.processes[A100] = [process(JOB_PID, 1 << 30)]
    with GpuMeter([A100], belongs=lambda pid: pid == JOB_PID) as meter:
        (sample,) = meter.sample(0)
        (usage,) = meter.usage()
    assert sample == GpuSample(0, A100, 1 << 30, None, None)
    assert usage == GpuUsage(A100, None, 1 << 30, None, 1)


def test_fake_membership_is_asked_once_per_pid(fake_nvml):
    asked: list[int] = []

    def belongs(pid: int) -> bool:
        asked.append(pid)
        return pid == JOB_PID

    with GpuMeter([H100], belongs=belongs) as meter:
        for t_ms in range(0, 500, 100):
            meter.sample(t_ms)
    assert sorted(asked) == [OTHER_PID, JOB_PID]


def test_fake_nvml_errors_other_than_no_data_propagate(fake_nvml, monkeypatch):
    def lost(handle, since):
        raise pynvml.NVMLError_GpuIsLost()

    monkeypatch.setattr(pynvml, "nvmlDeviceGetProcessUtilization", lost)
    with (
        GpuMeter([H100], belongs=lambda pid: True) as meter,
        pytest.raises(pynvml.NVMLError_GpuIsLost),
    ):
        meter.sample(0)


def test_without_a_driver_here_the_real_nvml_says_no_gpu():
    """The real library on this machine (no driver): the no-GPU path, not a fake."""
    inventory = gpu_inventory()
    if inventory.gpus:
        assert inventory.note == ""
    else:
        assert inventory.note.startswith(nvml.NO_GPU)
