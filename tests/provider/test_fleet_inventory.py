"""What a fleet offers (`fleet_inventory`): each node counts with what it advertises to Ray (a
machine lending 1 of its 2 GPUs offers one), its disk and GPU models its own; and a head that
does not answer, said at once. No cluster."""

from __future__ import annotations

import pytest

from provider.config import DaemonSettings, RunnerSettings
from provider.gpu.inventory import GpuInfo, GpuInventory, HostInventory
from provider.placement.ray_fleet import FleetUnreachable, Node, RayPlacement, fleet_inventory
from tests.provider.ray_cluster import free_ports

GIB = 1 << 30


def machine(name: str, gpus: int) -> HostInventory:
    found = tuple(
        GpuInfo(i, f"GPU-{name}-{i}", "NVIDIA H200", 141 * GIB, "9.0", "disabled")
        for i in range(gpus)
    )  # fmt: skip
    return HostInventory(
        cpu_cores=64, memory_bytes=512 * GIB, disk_total_bytes=4000 * GIB,
        disk_free_bytes=3000 * GIB, gpu=GpuInventory(found, "570.1", "12.8"),
    )  # fmt: skip


def test_nodes_add_up_as_they_advertise_to_ray() -> None:
    parts = [
        (Node("n1", "gpu-1", {"CPU": 30.0, "GPU": 1.0, "memory": float(100 * GIB)}, "10.0.0.1"),
         machine("a", 2)),
        (Node("n2", "cpu-1", {"CPU": 8.0, "memory": float(16 * GIB)}, "10.0.0.2"),
         machine("b", 0)),
        (Node("n3", "gpu-2", {"CPU": 10.0, "GPU": 2.0, "memory": float(50 * GIB)}, "10.0.0.3"),
         machine("c", 2)),
    ]  # fmt: skip
    fleet = fleet_inventory(parts)
    assert fleet.cpu_cores == 48 and fleet.memory_bytes == 166 * GIB
    assert fleet.disk_free_bytes == 9000 * GIB and fleet.disk_total_bytes == 12000 * GIB
    assert [(g.index, g.uuid) for g in fleet.gpu.gpus] == [
        (0, "GPU-a-0"), (1, "GPU-c-0"), (2, "GPU-c-1"),
    ]  # fmt: skip
    assert fleet.gpu.driver_version == "570.1" and fleet.gpu.note == ""


def test_a_fleet_without_gpus_says_why() -> None:
    fleet = fleet_inventory([(Node("n", "cpu", {"CPU": 4.0}, "10.0.0.4"), machine("a", 1))])
    assert fleet.gpu.gpus == () and fleet.gpu.note == "no node advertises a GPU"
    assert fleet.cpu_cores == 4 and fleet.memory_bytes == 0


def test_a_head_that_does_not_answer_is_said_at_once(tmp_path) -> None:
    address = f"127.0.0.1:{free_ports(1)[0]}"  # nothing listens there
    daemon = DaemonSettings(placement="ray", ray_address=address)
    with pytest.raises(FleetUnreachable, match=f"the Ray head at {address} does not answer"):
        RayPlacement.connect(daemon, RunnerSettings(state_dir=tmp_path / "state"))
