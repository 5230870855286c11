"""The PyTorch example job's CUDA path, on a machine with an NVIDIA GPU (marked `gpu`, deselected
in CI with `-m "not gpu"`). The script (`provider/images/torch_job/train_cnn.py`) trains on the
GPU, checkpoints, and a second run resumes there from the first's checkpoint: run by the
host's python where it has a CUDA build of torch, and as a job in the hardened runner with the
GPU pinned, in a CUDA build of PyTorch from a registry (the image a renter names on a GPU
provider) with the script handed in as the job's input. Each skips, saying why, where its
torch, GPU, NVIDIA container runtime or image is missing."""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from offchain.protocol.job.jobspec import InputFile, JobSpec, Resources
from provider.config import RunnerSettings
from provider.gpu import nvml
from provider.gpu.inventory import host_inventory
from provider.images.torch import TORCH_SCRIPTS
from provider.sandbox.runner import Runner
from provider.selftest.checks import GPU_BENCH_IMAGE
from tests.provider.test_gpu_daemon import nvidia_docker

pytestmark = pytest.mark.gpu
SCRIPT = TORCH_SCRIPTS / "train_cnn.py"


def train(out: Path, steps: int, resume: Path) -> dict[str, object]:
    out.mkdir()
    command = [sys.executable, str(SCRIPT), "--steps", str(steps), "--checkpoint-every", "100",
               "--out", str(out), "--resume", str(resume)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads((out / "metrics.json").read_text())


def test_the_example_trains_on_cuda_and_resumes_there(tmp_path):
    torch = pytest.importorskip("torch", reason="no torch for this python: pip install torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device here")
    first = train(tmp_path / "first", 200, tmp_path / "none.pt")
    assert (first["device"], first["started_at_step"], first["steps"]) == ("cuda", 0, 200)
    second = train(tmp_path / "second", 300, tmp_path / "first" / "checkpoint.pt")
    assert (second["device"], second["started_at_step"], second["steps"]) == ("cuda", 200, 300)
    assert torch.load(tmp_path / "second" / "checkpoint.pt")["step"] == 300


def test_the_example_job_trains_on_the_pinned_gpu_in_a_cuda_image(tmp_path):
    inventory = host_inventory(tmp_path)
    if not inventory.gpu.gpus:
        pytest.skip(nvml.NO_GPU)
    client = nvidia_docker()
    script = SCRIPT.read_bytes()
    given = InputFile(
        path="train_cnn.py", sha256=hashlib.sha256(script).hexdigest(),
        url="data:text/x-python;base64," + base64.b64encode(script).decode(),
    )  # fmt: skip
    spec = JobSpec(
        image=GPU_BENCH_IMAGE, command=["python3", "/in/train_cnn.py", "--steps", "200"],
        inputs=[given], resources=Resources(gpus=1, cpu_cores=1, memory_mib=4096, disk_mib=64),
        max_duration_s=300, max_price_lovelace=0,
    )  # fmt: skip
    runner = Runner(client, RunnerSettings(state_dir=tmp_path / "state", pull_images=True))
    result = runner.run("torch_gpu_job", spec, [inventory.gpu.gpus[0].uuid])
    if result.status == "error" and "could not be pulled" in (result.error or ""):
        pytest.fail(f"no {GPU_BENCH_IMAGE} here and no registry: {result.error}")
    assert result.status == "succeeded", result
    assert result.record is not None and result.record.gpu_usage[0].processes >= 1
    log = result.log_path.read_text() if result.log_path else ""
    assert "training on cuda from step 0 to 200" in log, log
