"""The self-test of a slice of a GPU, run inside it (PyTorch): matrix products for about a
second (matmul.py's, beside this script), then device memory taken in chunks up to the slice's
limit, then one chunk past it, which the slice must refuse. Prints {"gflops": ...,
"alloc_ok_mib": ..., "past_limit_refused": ...} as its last line.
Usage: slice_probe.py <limit MiB>."""

from __future__ import annotations

import json
import sys
from typing import Any

CHUNK_MIB = 64


def allocate(torch: Any, limit_mib: int) -> tuple[int, bool]:
    """MiB held in chunks up to the limit (fewer if refused sooner), and whether one chunk
    past the limit was refused."""
    held = []
    while (len(held) + 1) * CHUNK_MIB <= limit_mib:
        try:
            held.append(torch.empty(CHUNK_MIB << 20, dtype=torch.uint8, device="cuda"))
        except torch.cuda.OutOfMemoryError:
            break
    reached = len(held) * CHUNK_MIB
    past = limit_mib - reached + CHUNK_MIB  # what takes the job one chunk past its limit
    try:
        held.append(torch.empty(past << 20, dtype=torch.uint8, device="cuda"))
        refused = False
    except torch.cuda.OutOfMemoryError:
        refused = True
    return reached, refused


def main() -> None:
    import torch
    from matmul import gpu_rate  # beside this script (the self-test gives both)

    limit_mib = int(sys.argv[1])
    rate = int(gpu_rate() / 1e9)
    torch.cuda.empty_cache()
    reached, refused = allocate(torch, limit_mib)
    print(json.dumps({"gflops": rate, "alloc_ok_mib": reached, "past_limit_refused": refused}))


if __name__ == "__main__":
    main()
