"""GPUs are pinned by UUID. No machine here runs a GPU in a container, so these tests check the
request the runner sends (as docker-py encodes it, and as the real engine records it) and that
an image cannot widen it."""

from __future__ import annotations

import pytest
from docker.models.containers import _create_container_args

from provider.config import RunnerSettings
from provider.sandbox.hardening import JobMounts, container_options
from provider.selftest.checks import job, log_text

GPUS = ["GPU-8e3f3a0c-0000-4000-8000-000000000001", "GPU-8e3f3a0c-0000-4000-8000-000000000002"]


def options_for(tmp_path, gpus, image="unchained/busybox:any"):
    spec = job(image, ["nvidia-smi", "-L"], gpus=len(gpus))
    mounts = JobMounts(out=tmp_path, inputs=None)
    return container_options("r1", "gpu_job", spec, image, mounts, gpus, "/unchained/r1_gpu_job",
                             RunnerSettings(state_dir=tmp_path))  # fmt: skip


def encoded(options):
    """The create request as docker-py puts it on the wire (its own encoder, API 1.41)."""
    return _create_container_args({**options, "version": "1.41"})


def test_the_gpu_request_names_each_gpu_by_uuid(tmp_path):
    args = encoded(options_for(tmp_path, GPUS))
    assert args["host_config"]["DeviceRequests"] == [
        {
            "Driver": "",
            "Count": 0,  # not -1 ("all"): only the listed devices
            "DeviceIDs": GPUS,
            "Capabilities": [["gpu", "compute", "utility"]],
            "Options": {},
        }
    ]
    env = args["environment"]
    assert env["NVIDIA_VISIBLE_DEVICES"] == ",".join(GPUS)
    assert env["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility"


def test_a_cpu_job_asks_for_no_device_and_hides_every_gpu(tmp_path):
    args = encoded(options_for(tmp_path, []))
    assert "DeviceRequests" not in args["host_config"]
    assert args["environment"]["NVIDIA_VISIBLE_DEVICES"] == "void"


def test_the_engine_records_the_request_as_sent(client, tmp_path, busybox):
    container = client.containers.create(**options_for(tmp_path, GPUS, busybox))
    try:
        host = container.attrs["HostConfig"]
        assert host["DeviceRequests"] == [
            {
                "Driver": "",
                "Count": 0,
                "DeviceIDs": GPUS,
                "Capabilities": [["gpu", "compute", "utility"]],
                "Options": {},
            }
        ]
        assert host["CgroupParent"] == "/unchained/r1_gpu_job"
        assert host["ReadonlyRootfs"] and host["CapDrop"] == ["ALL"]
        assert host["NetworkMode"] == "none" and host["SecurityOpt"] == ["no-new-privileges:true"]
        assert host["Memory"] == host["MemorySwap"] == 512 << 20
        assert f"NVIDIA_VISIBLE_DEVICES={','.join(GPUS)}" in container.attrs["Config"]["Env"]
    finally:
        container.remove(force=True)


@pytest.fixture
def greedy_image(client, busybox):
    """An image that asks for every GPU, as CUDA base images do."""
    holder = client.containers.create(busybox, ["true"])
    image = holder.commit("unchained/test-greedy", "1", changes=["ENV NVIDIA_VISIBLE_DEVICES=all"])
    holder.remove()
    yield "unchained/test-greedy:1"
    client.images.remove(image.id, force=True)


def test_an_image_cannot_widen_the_gpus_a_job_gets(runner, greedy_image):
    result = runner.run("greedy", job(greedy_image, ["sh", "-c", "echo $NVIDIA_VISIBLE_DEVICES"]))
    assert log_text(result) == "void\n"
