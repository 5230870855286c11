"""A realistic job: a small neural network trained with NumPy in the Python image, metered."""

from __future__ import annotations

import io
import json
import zipfile

from provider.images.recipes import WORKLOADS_IN_IMAGE
from provider.selftest.checks import archive_files, job


def test_training_a_small_network_runs_meters_and_delivers_its_model(runner, python):
    lines: list[str] = []
    command = ["python3", f"{WORKLOADS_IN_IMAGE}/train_mlp.py", "--epochs", "100"]
    result = runner.run("train_mlp", job(python, command, memory_mib=256), on_log=lines.append)
    assert result.status == "succeeded"
    assert "epoch 100 loss" in "".join(lines)  # progress streamed while it trained
    files = archive_files(result.output)
    metrics = json.loads(files["metrics.json"])
    assert metrics["epochs"] == 100 and metrics["accuracy"] >= 0.95
    with zipfile.ZipFile(io.BytesIO(files["model.npz"])) as model:  # NumPy's .npz: a zip of .npy
        assert sorted(model.namelist()) == [
            f"{n}.npy" for n in ("b1", "b2", "b3", "w1", "w2", "w3")
        ]
        assert b"'shape': (2, 64)" in model.read("w1.npy")[:128]
    record = result.record
    assert abs(record.cpu_ns - metrics["cpu_ns"]) <= 0.05 * metrics["cpu_ns"]
    assert 0 < record.memory_peak_bytes <= 256 << 20
    assert record.billable_units == -(-record.wall_ms // 1000)
