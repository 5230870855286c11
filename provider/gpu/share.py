"""How a shared GPU's slices are enforced, chosen per GPU from what the driver gives, in order:
MIG where the GPU supports it and it is enabled (each slice a MIG instance, by its UUID:
hardware isolation of memory, cache and SMs), else MPS where the control program is installed
(`mps.py`: per-job memory limit and SM share, one server per GPU), else none: the GPU is not
offered in fractions, and the reason says why.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from offchain.protocol.job.gpu_slices import FAULT_NOTES
from offchain.protocol.job.gpu_slices import Isolation as Held
from provider.gpu import mps, nvml
from provider.gpu.inventory import GpuInfo

Isolation = Literal["mig", "mps", "none"]


@dataclass(frozen=True)
class MigInstance:
    uuid: str  # MIG-...: what a container on the slice is given
    memory_mib: int


@dataclass(frozen=True)
class GpuIsolation:
    uuid: str
    index: int  # the GPU's host index (MPS limits name the device by it)
    kind: Isolation
    reason: str  # why this kind; for "none", why no fractions are offered
    fault_note: str = ""
    instances: tuple[MigInstance, ...] = ()  # MIG only

    @property
    def offers_fractions(self) -> bool:
        return self.kind != "none"


def choose(gpu: GpuInfo, instances: list[MigInstance], mps_control: str | None) -> GpuIsolation:
    """The isolation for one GPU, from its MIG mode, its MIG instances and the MPS program."""
    if gpu.mig_mode == "enabled":
        if instances:
            return GpuIsolation(
                gpu.uuid, gpu.index, "mig", f"MIG enabled, {len(instances)} instance(s)",
                FAULT_NOTES["mig"], tuple(instances),
            )  # fmt: skip
        return GpuIsolation(
            gpu.uuid, gpu.index, "none",
            "MIG is enabled but no MIG instance is made (nvidia-smi mig -cgi ... -C)",
        )  # fmt: skip
    if mps_control is not None:
        why = "MIG unsupported" if gpu.mig_mode == "unsupported" else "MIG disabled"
        return GpuIsolation(
            gpu.uuid, gpu.index, "mps", f"{why}; MPS ({mps_control})", FAULT_NOTES["mps"]
        )
    return GpuIsolation(
        gpu.uuid, gpu.index, "none",
        f"no MIG ({gpu.mig_mode}) and no {mps.CONTROL} on PATH: no fractions offered",
    )  # fmt: skip


def isolation_of(gpus: list[GpuInfo], mps_control: str | None = None) -> dict[str, GpuIsolation]:
    """The isolation of each GPU (by UUID), reading MIG instances through NVML; the MPS
    program found on PATH unless given."""
    control = mps_control if mps_control is not None else mps.control_binary()
    chosen = {}
    with nvml.session():
        for gpu in gpus:
            found: list[MigInstance] = []
            if gpu.mig_mode == "enabled":
                handle = nvml.handle_by_uuid(gpu.uuid)
                found = [MigInstance(u, m >> 20) for u, m in nvml.mig_instances(handle)]
            chosen[gpu.uuid] = choose(gpu, found, control)
    return chosen


def isolator(gpu: GpuInfo) -> tuple[Held, tuple[str, ...]] | str:
    """The isolation of one GPU as the daemon's capacity takes it (`capacity.Isolator`): MIG
    with its instances' UUIDs, or MPS, or why the GPU offers no fractions."""
    (chosen,) = isolation_of([gpu]).values()
    if chosen.kind == "none":
        return chosen.reason
    return chosen.kind, tuple(instance.uuid for instance in chosen.instances)
