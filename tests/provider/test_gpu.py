"""The real NVML path, on a machine with an NVIDIA GPU and driver (marked `gpu`; elsewhere they
skip, saying so). The GPU machine has PyTorch but no docker engine, so the per-process test
meters a real CUDA process found through its cgroup, as the runner finds a container's.

Needs only nvidia-ml-py, pydantic and pytest there:
`pytest --noconftest -m gpu tests/provider/test_gpu.py`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from provider.gpu import nvml
from provider.gpu.inventory import GpuInventory, gpu_inventory
from provider.metering.cgroups import cgroup_of
from provider.metering.gpu import GpuMeter

pytestmark = pytest.mark.gpu

CUDA_LOAD = """
import torch
x = torch.rand((8192, 8192), device="cuda")
torch.cuda.synchronize()
print("ready", flush=True)
for _ in range(400):
    x = (x @ x).clamp_(-1, 1)
torch.cuda.synchronize()
"""


@pytest.fixture(scope="module")
def gpus() -> GpuInventory:
    inventory = gpu_inventory()
    if not inventory.gpus:
        pytest.skip(nvml.NO_GPU)
    return inventory


def test_real_inventory_describes_every_gpu(gpus):
    assert gpus.driver_version and gpus.cuda_version and gpus.note == ""
    for gpu in gpus.gpus:
        assert gpu.uuid.startswith(("GPU-", "MIG-")) and gpu.name
        assert gpu.memory_bytes > 1 << 30
        major, minor = gpu.compute_capability.split(".")
        assert int(major) >= 3 and minor.isdigit()
        assert gpu.mig_mode in ("enabled", "disabled", "unsupported")


def test_real_cuda_process_is_metered_through_its_cgroup(gpus):
    gpu = gpus.gpus[0]
    load = subprocess.Popen(
        [sys.executable, "-c", CUDA_LOAD],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": gpu.uuid},
    )
    try:
        assert load.stdout is not None and load.stdout.readline() == "ready\n"
        job_cgroup = cgroup_of(load.pid)
        assert job_cgroup is not None
        with GpuMeter([gpu.uuid], belongs=lambda pid: cgroup_of(pid) == job_cgroup) as meter:
            samples = []
            while load.poll() is None and len(samples) < 30:
                samples.extend(meter.sample(len(samples) * 100))
                time.sleep(0.1)
            (usage,) = meter.usage()
    finally:
        load.kill()
        load.wait()
    assert usage.processes >= 1
    assert usage.memory_peak_bytes >= 8192 * 8192 * 4  # the matrix, at least
    assert any(s.sm_percent for s in samples) or gpu.mig_mode == "enabled"
    if usage.energy_mj is not None:
        assert usage.energy_mj > 0
