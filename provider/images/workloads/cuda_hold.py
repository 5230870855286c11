"""Holds GPU memory through the CUDA driver API (ctypes: no framework needed; libcuda is
mounted by the NVIDIA runtime): `cuda_hold.py <MiB> <seconds>` allocates on device 0, prints
"holding" and sleeps; an allocation the driver refuses (a slice's limit) prints "refused" and
exits 3."""

from __future__ import annotations

import ctypes
import sys
import time

REFUSED = 3


def main() -> None:
    mib, seconds = int(sys.argv[1]), float(sys.argv[2])
    cuda = ctypes.CDLL("libcuda.so.1")
    assert cuda.cuInit(0) == 0
    device, context, memory = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
    assert cuda.cuDeviceGet(ctypes.byref(device), 0) == 0
    assert cuda.cuCtxCreate_v2(ctypes.byref(context), 0, device) == 0
    if cuda.cuMemAlloc_v2(ctypes.byref(memory), mib << 20) != 0:
        print("refused", flush=True)
        sys.exit(REFUSED)
    print(f"holding {mib} MiB", flush=True)
    time.sleep(seconds)


if __name__ == "__main__":
    main()
