"""Sharing a GPU for real, on a machine with an NVIDIA GPU (marked `gpu`; deselected in CI with
`-m "not gpu"`, and skipping, saying why, where there is no GPU, no MPS or no docker). Without
docker (the GPU machines lent so far have none) the renters are processes given exactly what a
job container on a slice gets (bench/gpu_sharing.py); with docker and the NVIDIA runtime, two
job containers run through the runner. Run there:
`pytest --noconftest -m gpu tests/provider/test_gpu_sharing.py -s` (the ratio is printed;
nvidia-ml-py, pydantic, PyYAML and PyTorch are enough, docker-py only for the container test)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from bench import gpu_sharing
from provider.gpu import mps, nvml
from provider.gpu.inventory import GpuInfo, gpu_inventory
from provider.gpu.share import isolation_of

pytestmark = pytest.mark.gpu

WORKLOADS = Path(mps.__file__).parent / "workloads"  # provider.images.recipes needs docker-py
PROBE, HOLD = WORKLOADS / "slice_probe.py", WORKLOADS / "cuda_hold.py"


@pytest.fixture(scope="module")
def gpu() -> GpuInfo:
    inventory = gpu_inventory()
    if not inventory.gpus:
        pytest.skip(nvml.NO_GPU)
    return inventory.gpus[0]


@pytest.fixture(scope="module")
def mps_gpu(gpu) -> GpuInfo:
    chosen = isolation_of([gpu])[gpu.uuid]
    if chosen.kind != "mps":
        pytest.skip(f"this GPU is not shared by MPS here: {chosen.reason}")
    return gpu


def test_real_isolation_follows_the_driver(gpu):
    chosen = isolation_of([gpu])[gpu.uuid]
    if gpu.mig_mode == "enabled":
        assert chosen.kind in ("mig", "none")
    else:
        assert chosen.kind == ("mps" if mps.control_binary() else "none"), chosen.reason


def test_real_two_renters_metered_apart_and_the_operators_rate_beside_them(mps_gpu, tmp_path):
    results = gpu_sharing.measure(mps_gpu, tmp_path, seconds=4.0)
    print(json.dumps(results, indent=1))
    small, large = results["renters"]
    for renter in (small, large):
        assert renter["processes"] == 1 and renter["per_s"] > 0
        # its own memory (what it holds, its matrices, its context), never the other's; the
        # limit bounds its allocations, NVML's figure may add a context's few hundred MiB
        assert renter["held_mib"] <= renter["memory_peak_mib"] <= renter["memory_mib"] + 512
    assert small["memory_peak_mib"] < large["held_mib"] + 256
    assert 0 < results["operator_ratio"] <= 1.5


def test_real_a_renter_is_refused_past_its_memory_limit(mps_gpu, tmp_path):
    piece = gpu_sharing.slices_of(mps_gpu)[0]
    daemon = mps.start_for(tmp_path, [piece])
    assert daemon is not None
    try:
        env = gpu_sharing.renter_env(mps_gpu, daemon, piece)
        done = subprocess.run([sys.executable, str(PROBE), str(piece.memory_mib)], env=env,
                              capture_output=True, text=True, timeout=120)  # fmt: skip
        report = json.loads(done.stdout.strip().splitlines()[-1])
        print(report)
        assert report["past_limit_refused"] is True
        assert report["alloc_ok_mib"] * 4 >= piece.memory_mib * 3
        past = [sys.executable, str(HOLD), str(piece.memory_mib + 512), "0"]
        over = subprocess.run(past, env=env, capture_output=True, text=True, timeout=60)
        assert (over.returncode, over.stdout) == (3, "refused\n")
    finally:
        daemon.stop()


def test_real_a_renter_raising_its_own_limit_stays_under_the_largest_slice(mps_gpu, tmp_path):
    """Code in a job can change its own environment before CUDA starts; the daemon's defaults
    for its server (the largest slice) are the bound it cannot raise."""
    small, large = gpu_sharing.slices_of(mps_gpu)
    daemon = mps.start_for(tmp_path, [small, large])
    assert daemon is not None
    try:
        env = {**gpu_sharing.renter_env(mps_gpu, daemon, small),
               "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": f"0={4 * large.memory_mib}M",
               "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "100"}  # fmt: skip
        past = [sys.executable, str(HOLD), str(large.memory_mib + 1024), "0"]
        over = subprocess.run(past, env=env, capture_output=True, text=True, timeout=60)
        assert (over.returncode, over.stdout) == (3, "refused\n"), over
    finally:
        daemon.stop()


def test_real_two_job_containers_on_one_gpu_with_different_limits(mps_gpu, tmp_path):
    """Through the runner, where docker has the NVIDIA runtime: each job metered by its own
    processes (the record's GPU share), the one asking past its limit refused."""
    from offchain.protocol.job.jobspec import JobSpec, Resources
    from provider.config import RunnerSettings
    from provider.images import recipes as images
    from provider.sandbox.runner import Runner
    from tests.provider.test_gpu_daemon import nvidia_docker

    client = nvidia_docker()
    small, large = gpu_sharing.slices_of(mps_gpu)
    state = tmp_path / "state"
    mps.start_for(state, [small, large])
    runner = Runner(client, RunnerSettings(state_dir=state))

    def spec(asks_mib: int, piece) -> JobSpec:
        return JobSpec(
            image=images.workloads_image(client),
            command=["python3", f"{images.WORKLOADS_IN_IMAGE}/cuda_hold.py", str(asks_mib), "3"],
            resources=Resources(cpu_cores=1, memory_mib=1024, disk_mib=16,
                                gpu_memory_mib=piece.memory_mib, gpu_sm_percent=piece.sm_percent),
            max_duration_s=60, max_price_lovelace=0,
        )  # fmt: skip

    results = {}
    jobs = {"small_ok": (1024, small), "large_ok": (3072, large), "small_over": (2560, small)}
    threads = [
        threading.Thread(target=lambda n=name, a=asks, p=piece: results.__setitem__(
            n, runner.run(n, spec(a, p), [], gpu_slice=p)))
        for name, (asks, piece) in jobs.items()
    ]  # fmt: skip
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        mps.MpsDaemon(state).stop()
    assert results["small_ok"].status == results["large_ok"].status == "succeeded"
    assert results["small_over"].status == "failed" and results["small_over"].exit_code == 3
    for name, least in (("small_ok", 1024), ("large_ok", 3072)):
        record = results[name].record
        assert record.gpu_share.sm_percent == jobs[name][1].sm_percent
        (usage,) = record.gpu_usage
        assert least << 20 <= usage.memory_peak_bytes <= (jobs[name][1].memory_mib + 512) << 20
        assert usage.energy_mj is None  # the device's energy is not one tenant's
