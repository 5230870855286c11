"""A short compute benchmark for the self-test: square matrix products for about a second, on
the CPU with NumPy or on a GPU with PyTorch. Prints {"device": ..., "gflops": ...}."""

from __future__ import annotations

import json
import sys
import time

N = 1024
SECONDS = 1.0


def cpu_rate() -> float:
    import numpy as np

    a = np.random.default_rng(0).random((N, N), dtype=np.float32)
    runs, start = 0, time.perf_counter()
    while time.perf_counter() - start < SECONDS:
        a @ a
        runs += 1
    return runs * 2 * N**3 / (time.perf_counter() - start)


def gpu_rate() -> float:
    import torch

    a = torch.rand((4 * N, 4 * N), device="cuda")
    torch.cuda.synchronize()
    runs, start = 0, time.perf_counter()
    while time.perf_counter() - start < SECONDS:
        a @ a
        runs += 1
        torch.cuda.synchronize()
    return runs * 2 * (4 * N) ** 3 / (time.perf_counter() - start)


def main() -> None:
    device = sys.argv[1] if len(sys.argv) > 1 else "cpu"
    rate = gpu_rate() if device == "cuda" else cpu_rate()
    print(json.dumps({"device": device, "gflops": round(rate / 1e9, 1)}))


if __name__ == "__main__":
    main()
