"""Sharing a GPU, measured on a real one: the operator's own CUDA loop (standing in for a miner)
alone, then beside two renters on MPS slices with different limits, each renter metered by
process (NVML, as the runner meters a job); the operator's rate beside the renters over its
rate alone is `operator_ratio`, as the first seed reported a miner's hash rate beside a network.

Needs an NVIDIA GPU, its driver, `nvidia-cuda-mps-control` and PyTorch; no docker (the GPU
machines lent so far have none): the renters are processes given what a job container on the
slice gets (the MPS limits and pipe, the GPU by UUID). Without a GPU it writes `device: null`
and no results: nothing here is ever made up. Writes bench/results/gpu_sharing.json.
Run: python -m bench.gpu_sharing
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from offchain.protocol.job.gpu_slices import GpuSlice
from provider.gpu import mps
from provider.gpu.inventory import GpuInfo, gpu_inventory
from provider.gpu.share import isolation_of
from provider.metering.gpu import GpuMeter

RESULTS = Path(__file__).parent / "results" / "gpu_sharing.json"
SECONDS = 5.0
SIZE = 4096  # the loops' square matrices
# two renters' slices: (memory MiB, SM percent) and what each holds of its memory
RENTERS = ((2048, 25, 1024), (4096, 50, 2048))
LOOP = """
import json, sys, time, torch
seconds, size, hold = float(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
held = torch.empty(hold << 20, dtype=torch.uint8, device="cuda") if hold else None
a = torch.rand((size, size), device="cuda")
torch.cuda.synchronize()
print("ready", flush=True)
runs, start = 0, time.perf_counter()
while time.perf_counter() - start < seconds:
    a = (a @ a).clamp_(-1, 1)
    torch.cuda.synchronize()
    runs += 1
print(json.dumps({"per_s": runs / (time.perf_counter() - start)}), flush=True)
"""


def cuda_loop(env: dict[str, str], seconds: float, hold_mib: int = 0) -> subprocess.Popen[str]:
    """A CUDA matmul loop in its own process, returned once it is ready to run."""
    loop = subprocess.Popen(
        [sys.executable, "-c", LOOP, str(seconds), str(SIZE), str(hold_mib)],
        stdout=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    assert loop.stdout is not None
    if loop.stdout.readline() != "ready\n":
        loop.kill()
        raise RuntimeError(f"the CUDA loop did not start (exit {loop.wait()})")
    return loop


def rate(loop: subprocess.Popen[str]) -> float:
    """The loop's products per second, once it ends."""
    out, _ = loop.communicate(timeout=120)
    return round(json.loads(out.strip().splitlines()[-1])["per_s"], 2)


def on_gpu(gpu: GpuInfo) -> dict[str, str]:
    return {**os.environ, "CUDA_VISIBLE_DEVICES": gpu.uuid}


def renter_env(gpu: GpuInfo, daemon: mps.MpsDaemon, piece: GpuSlice) -> dict[str, str]:
    """What a job container on `piece` gets, for a process on the host: the slice's limits,
    and the daemon's pipe where it is on the host (a container has it mounted)."""
    return {
        **on_gpu(gpu),
        **mps.slice_environment(piece.memory_mib, piece.sm_percent),
        "CUDA_MPS_PIPE_DIRECTORY": str(daemon.pipe_dir),
    }


def slices_of(gpu: GpuInfo) -> list[GpuSlice]:
    return [
        GpuSlice(gpu.uuid, gpu.index, gpu.name, n, memory, sm, "mps")
        for n, (memory, sm, _) in enumerate(RENTERS)
    ]


def measure(gpu: GpuInfo, state_dir: Path, seconds: float = SECONDS) -> dict[str, Any]:
    """The operator's loop alone, then beside the renters (each metered by its own PIDs)."""
    alone = rate(cuda_loop(on_gpu(gpu), seconds))
    pieces = slices_of(gpu)
    daemon = mps.start_for(state_dir, pieces)
    assert daemon is not None
    renters = []
    try:
        for piece, (_, _, hold) in zip(pieces, RENTERS, strict=True):
            renters.append(cuda_loop(renter_env(gpu, daemon, piece), seconds + 4, hold))
        meters = [GpuMeter([gpu.uuid], belongs=lambda pid, r=r: pid == r.pid, shared=True)
                  for r in renters]  # fmt: skip
        for meter in meters:
            meter.__enter__()
        operator = cuda_loop(on_gpu(gpu), seconds)
        t_ms = 0
        while operator.poll() is None:
            for meter in meters:
                meter.sample(t_ms)
            time.sleep(0.1)
            t_ms += 100
        beside = rate(operator)
        usages = [meter.usage()[0] for meter in meters]
        for meter in meters:
            meter.__exit__(None, None, None)
        renter_rates = [rate(r) for r in renters]
    finally:
        for renter in renters:
            renter.kill()
        daemon.stop()
    return {
        "isolation": "mps",
        "seconds": seconds,
        "matrix": SIZE,
        "operator_alone_per_s": alone,
        "operator_beside_renters_per_s": beside,
        "operator_ratio": round(beside / alone, 3),
        "renters": [
            {"memory_mib": piece.memory_mib, "sm_percent": piece.sm_percent, "held_mib": hold,
             "per_s": per_s, "memory_peak_mib": usage.memory_peak_bytes >> 20,
             "sm_percent_peak": usage.sm_percent_peak, "processes": usage.processes}
            for piece, (_, _, hold), per_s, usage in zip(pieces, RENTERS, renter_rates, usages,
                                                         strict=True)
        ],
    }  # fmt: skip


def run() -> dict[str, Any]:
    inventory = gpu_inventory()
    if not inventory.gpus:
        return {"device": None, "note": f"not measured: {inventory.note}", "results": {}}
    gpu = inventory.gpus[0]
    chosen = isolation_of([gpu])[gpu.uuid]
    report: dict[str, Any] = {"device": gpu.name, "driver": inventory.driver_version,
                              "isolation": chosen.kind, "why": chosen.reason}  # fmt: skip
    if chosen.kind != "mps":
        return {**report, "note": "not measured: the bench shares a GPU by MPS", "results": {}}
    with tempfile.TemporaryDirectory(prefix="unchained-gpu-sharing-") as state:
        return {**report, "results": measure(gpu, Path(state))}


def main() -> None:
    report = run()
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    print(f"written to {RESULTS}")


if __name__ == "__main__":
    main()
