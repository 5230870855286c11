"""What the daemon offers and how many jobs run at once: the operator's offer cut into equal
slots (one per offered GPU, or `cpu_bundles` CPU-only slots), each the bundle one job gets.
A job takes a free slot or waits: the machine is never promised twice."""

from __future__ import annotations

import dataclasses

from offchain.protocol.jobspec import Resources
from provider.config import MIB, Offer
from provider.inventory import HostInventory


@dataclasses.dataclass(frozen=True)
class Slot:
    index: int
    gpu_uuids: tuple[str, ...]
    bundle: Resources


@dataclasses.dataclass(frozen=True)
class Bundle:
    """The offer as the market shows it: one slot's resources, the GPUs' model and the price."""

    resources: Resources
    gpu_model: str
    price_per_unit: int
    slots: int  # jobs at once, each with these resources


def slots_of(offer: Offer, inventory: HostInventory) -> tuple[Bundle, list[Slot]]:
    """The offer's bundle and its slots. GPUs are those offered and present; with several
    models, only the first model's are offered (one offer per model would price each)."""
    present = {gpu.uuid: gpu for gpu in inventory.gpu.gpus}
    gpus = [present[uuid] for uuid in offer.gpus if uuid in present]
    gpus = [gpu for gpu in gpus if gpu.name == gpus[0].name] if gpus else []
    count = len(gpus) or offer.cpu_bundles
    resources = Resources(
        gpus=1 if gpus else 0,
        min_vram_mib=min(gpu.memory_bytes for gpu in gpus) // MIB if gpus else 0,
        cpu_cores=max(1, offer.cpu_cores // count),
        memory_mib=max(16, offer.memory_mib // count),
        disk_mib=max(1, offer.disk_mib // count),
    )
    bundle = Bundle(resources, gpus[0].name if gpus else "", offer.bundle_price(resources), count)
    slots = [
        Slot(n, (gpus[n].uuid,) if gpus else (), resources) for n in range(count)
    ]  # fmt: skip
    return bundle, slots


class Capacity:
    """Which slots are free and which job holds each busy one."""

    def __init__(self, slots: list[Slot]) -> None:
        self.slots = slots
        self.holders: dict[int, str] = {}

    def free(self) -> int:
        return len(self.slots) - len(self.holders)

    def take(self, job_id: str, wanted: int | None = None) -> Slot | None:
        """A free slot for `job_id` (slot `wanted` if given and free), or None."""
        for slot in self.slots:
            if slot.index not in self.holders and wanted in (None, slot.index):
                self.holders[slot.index] = job_id
                return slot
        return None

    def release(self, job_id: str) -> None:
        self.holders = {index: job for index, job in self.holders.items() if job != job_id}
