"""GPUs: NVML, the machine's inventory, sharing a GPU (MIG, MPS)."""
