"""This machine's inventory, for real: cores, memory and disk, and GPUs or the reason for none."""

from __future__ import annotations

import os
import shutil

from provider.gpu import nvml
from provider.gpu.inventory import host_inventory


def test_the_host_inventory_matches_what_the_system_says(tmp_path):
    inventory = host_inventory(tmp_path)
    assert inventory.cpu_cores == len(os.sched_getaffinity(0))
    assert inventory.memory_bytes == os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert inventory.disk_total_bytes == shutil.disk_usage(tmp_path).total
    gpu = inventory.gpu
    assert bool(gpu.gpus) != gpu.note.startswith(nvml.NO_GPU)  # GPUs, or the reason for none


def test_a_state_dir_not_made_yet_is_measured_on_its_filesystem(tmp_path):
    inventory = host_inventory(tmp_path / "not" / "yet")
    assert inventory.disk_total_bytes > 0
