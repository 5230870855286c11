"""The daemon's GPU path on a machine with an NVIDIA GPU (marked `gpu`, deselected in CI with
`-m "not gpu"`): the offer the daemon publishes names the real GPU as NVML names it, one slot
per GPU with its memory; and a job's CUDA process in a container, started by the runner with
the GPU pinned by UUID, is found and metered by NVML per process. The container test needs a
docker engine with the NVIDIA container toolkit and skips, saying so, where there is none
(the GPU machines lent so far have no docker). The CUDA process calls the driver API through
ctypes (libcuda is mounted by the toolkit: workloads/cuda_hold.py), so the project's Python
image is enough."""

from __future__ import annotations

import docker
import pytest

from offchain.protocol.job.jobspec import JobSpec, Resources
from provider.capacity import slots_of
from provider.config import MIB, Offer, RunnerSettings
from provider.daemon.bond import BondView
from provider.daemon.offers import offer_terms
from provider.gpu import nvml
from provider.gpu.inventory import host_inventory
from provider.images import recipes as images
from provider.sandbox.runner import Runner

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def inventory(tmp_path_factory):
    found = host_inventory(tmp_path_factory.mktemp("disk"))
    if not found.gpu.gpus:
        pytest.skip(nvml.NO_GPU)
    return found


def test_the_offer_names_each_real_gpu_exactly(inventory):
    gpus = inventory.gpu.gpus
    offer = Offer(gpus=[gpu.uuid for gpu in gpus], cpu_cores=len(gpus), memory_mib=1024 * len(gpus),
                  disk_mib=64 * len(gpus))  # fmt: skip
    bundle, slots = slots_of(offer, inventory)
    first = [gpu for gpu in gpus if gpu.name == gpus[0].name]  # one model per offer
    assert bundle.gpu_model == gpus[0].name and bundle.slots == len(first) == len(slots)
    assert [slot.gpu_uuids for slot in slots] == [(gpu.uuid,) for gpu in first]
    assert bundle.resources.min_vram_mib == min(gpu.memory_bytes for gpu in first) // MIB
    terms = offer_terms(bundle, "addr_test1", BondView(None, 0, None))
    assert terms["gpu_model"] == gpus[0].name and terms["gpu_count"] == 1
    assert not any(gpu.uuid in str(terms) for gpu in gpus)  # UUIDs stay private


def nvidia_docker() -> docker.DockerClient:
    """The docker engine, where it has the NVIDIA runtime (else the test skips: this machine's
    GPU is not reachable from containers); no engine at all is a set-up fault, not a skip."""
    try:
        client = docker.from_env()
        runtimes = client.info().get("Runtimes", {})
    except docker.errors.DockerException as exc:
        pytest.fail(f"no docker engine here ({exc}): run scripts/setup-docker.sh")
    if "nvidia" not in runtimes:
        pytest.skip("docker has no NVIDIA runtime here (nvidia-container-toolkit)")
    return client


def test_a_cuda_process_in_a_job_container_is_metered_by_nvml(inventory, tmp_path):
    client = nvidia_docker()
    gpu = inventory.gpu.gpus[0]
    runner = Runner(client, RunnerSettings(state_dir=tmp_path / "state"))
    spec = JobSpec(
        image=images.workloads_image(client),
        command=["python3", f"{images.WORKLOADS_IN_IMAGE}/cuda_hold.py", "512", "4"],
        resources=Resources(gpus=1, cpu_cores=1, memory_mib=1024, disk_mib=16),
        max_duration_s=60, max_price_lovelace=0,
    )  # fmt: skip
    result = runner.run("cuda_job", spec, [gpu.uuid])
    assert result.status == "succeeded", result
    (usage,) = result.record.gpu_usage
    assert usage.uuid == gpu.uuid and usage.processes >= 1
    assert usage.memory_peak_bytes >= 512 * MIB
    assert runner.leftovers() == {"containers": [], "workspaces": [], "cgroups": []}
