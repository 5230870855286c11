"""What the daemon offers and how many jobs run at once: the operator's offer cut into equal
slots (one per offered GPU, or `cpu_bundles` CPU-only slots), each the bundle one job gets,
and beside them one slot per slice of each shared GPU (`[[offer.shared_gpus]]`), each a
fraction of that GPU with the same share of cores, memory and disk. A job takes a free slot of
its kind (whole, or a slice at least as large as the fraction it asks) or waits: the machine
is never promised twice."""

from __future__ import annotations

import dataclasses
import shutil
from collections import Counter
from collections.abc import Callable

from offchain.protocol.job.gpu_slices import (
    FAULT_NOTES,
    MAX_PRICE_PER_UNIT,
    GpuSlice,
    Isolation,
    SliceOffer,
)
from offchain.protocol.job.jobspec import Resources
from provider.config import MIB, ConfigError, Offer, SharedGpu
from provider.gpu.inventory import GpuInfo, HostInventory

MPS_CONTROL = "nvidia-cuda-mps-control"
# how a shared GPU is held to its slices: the isolation and, for MIG, the instances' UUIDs
# (one slice each); or a text saying why it cannot be shared (no fractions offered)
Isolator = Callable[[GpuInfo], tuple[Isolation, tuple[str, ...]] | str]


def mps_where_installed(gpu: GpuInfo) -> tuple[Isolation, tuple[str, ...]] | str:
    """MPS when its control daemon is installed and MIG is off. A MIG GPU's slices are its
    instances, which only an isolator that lists them (provider.gpu.share) can offer."""
    if gpu.mig_mode == "enabled":
        return "MIG is enabled but its instances are not listed here: no fractions"
    if shutil.which(MPS_CONTROL) is None:
        return f"{MPS_CONTROL} is not installed (no MIG, no MPS): no fractions"
    return "mps", ()


@dataclasses.dataclass(frozen=True)
class Slot:
    index: int
    gpu_uuids: tuple[str, ...]
    bundle: Resources
    gpu_slice: GpuSlice | None = None  # a slice of a shared GPU (gpu_uuids is empty then)
    price_per_unit: int | None = None  # a slice's price; None: the offer's bundle price

    def fits(self, wanted: Resources) -> bool:
        """Whether a job asking `wanted` takes this kind of slot: a fraction takes a slice at
        least that large, anything else a whole slot."""
        fraction = wanted.fraction
        if self.gpu_slice is None or fraction is None:
            return self.gpu_slice is None and fraction is None
        return fraction[0] <= self.gpu_slice.memory_mib and fraction[1] <= self.gpu_slice.sm_percent


@dataclasses.dataclass(frozen=True)
class Bundle:
    """The offer as the market shows it: one slot's resources, the GPUs' model and the price,
    and the slices of shared GPUs offered beside (`no_slices`: why none, when GPUs are shared
    in the config but none can be)."""

    resources: Resources
    gpu_model: str
    price_per_unit: int
    slots: int  # jobs at once, each with these resources
    gpu_slices: tuple[SliceOffer, ...] = ()
    slice_prices: tuple[int, ...] = ()  # lovelace per second of a job on each entry's slice
    no_slices: str = ""


def slots_of(
    offer: Offer, inventory: HostInventory, isolator: Isolator = mps_where_installed
) -> tuple[Bundle, list[Slot]]:
    """The offer's bundle and its slots. GPUs are those offered and present; with several
    models, only the first model's are offered (one offer per model would price each). Shared
    GPUs add a slot per slice; ConfigError when one's slices and what is kept do not fit it."""
    present = {gpu.uuid: gpu for gpu in inventory.gpu.gpus}
    gpus = [present[uuid] for uuid in offer.gpus if uuid in present]
    gpus = [gpu for gpu in gpus if gpu.name == gpus[0].name] if gpus else []
    slices, why = gpu_slices(offer.shared_gpus, present, isolator)
    count = len(gpus) or offer.cpu_bundles
    share = count + len(slices)
    resources = Resources(
        gpus=1 if gpus else 0,
        min_vram_mib=min(gpu.memory_bytes for gpu in gpus) // MIB if gpus else 0,
        cpu_cores=max(1, offer.cpu_cores // share),
        memory_mib=max(16, offer.memory_mib // share),
        disk_mib=max(1, offer.disk_mib // share),
    )
    slots = [
        Slot(n, (gpus[n].uuid,) if gpus else (), resources) for n in range(count)
    ]  # fmt: skip
    for piece in slices:
        fraction = resources.model_copy(update={"gpus": 0, "min_vram_mib": 0,
                                                "gpu_memory_mib": piece.memory_mib,
                                                "gpu_sm_percent": piece.sm_percent})  # fmt: skip
        cost = min(offer.bundle_price(fraction), MAX_PRICE_PER_UNIT)
        slots.append(Slot(len(slots), (), fraction, piece, cost))
    grouped = Counter(  # equal slices are one entry of the offer, with their count
        (slot.gpu_slice.gpu_model, slot.gpu_slice.memory_mib, slot.gpu_slice.sm_percent,
         slot.gpu_slice.isolation, slot.price_per_unit or 0)
        for slot in slots if slot.gpu_slice is not None
    )  # fmt: skip
    offered = [(SliceOffer(gpu_model=model, memory_mib=memory, sm_percent=sm, count=n,
                           isolation=isolation, fault_note=FAULT_NOTES[isolation]), price)
               for (model, memory, sm, isolation, price), n in sorted(grouped.items())]  # fmt: skip
    # the offer's model: its whole GPUs', else its slices' (a job on a slice is counted there)
    model = gpus[0].name if gpus else next((piece.gpu_model for piece in slices), "")
    bundle = Bundle(
        resources, model, offer.bundle_price(resources), count,
        tuple(entry for entry, _ in offered), tuple(price for _, price in offered), why,
    )  # fmt: skip
    return bundle, slots


def gpu_slices(
    shared: list[SharedGpu], present: dict[str, GpuInfo], isolator: Isolator
) -> tuple[list[GpuSlice], str]:
    """The slices of the shared GPUs present, and why any could not be shared ("" if all
    could)."""
    slices: list[GpuSlice] = []
    why: list[str] = []
    for config in shared:
        gpu = present.get(config.uuid)
        if gpu is None:
            why.append(f"{config.uuid}: not on this machine")
            continue
        memory = config.memory_mib(gpu.memory_bytes // MIB)
        held = isolator(gpu)
        if isinstance(held, str):
            why.append(f"{config.uuid}: {held}")
            continue
        isolation, instances = held
        if isolation == "mig" and not instances:
            raise ConfigError(f"offer.shared_gpus {config.uuid}: MIG without instances")
        count = min(config.slices, len(instances)) if isolation == "mig" else config.slices
        for n in range(count):
            slices.append(GpuSlice(
                gpu.uuid, gpu.index, gpu.name, n, memory, config.sm_percent(), isolation,
                instances[n] if isolation == "mig" else None,
            ))  # fmt: skip
    return slices, "; ".join(why)


WHOLE = Resources()  # what asks a whole slot (no fraction of a GPU)


class Capacity:
    """Which slots are free and which job holds each busy one."""

    def __init__(self, slots: list[Slot]) -> None:
        self.slots = slots
        self.holders: dict[int, str] = {}

    def free(self) -> int:
        return len(self.slots) - len(self.holders)

    def take(
        self, job_id: str, wanted: int | None = None, asks: Resources | None = None
    ) -> Slot | None:
        """A free slot for `job_id` (slot `wanted` if given and free; else one that `asks`
        fits, whole by default: the smallest slice that holds a fraction), or None."""
        kind = WHOLE if asks is None else asks
        ordered = sorted(self.slots, key=lambda slot: slot_size(slot))
        for slot in ordered if wanted is None else self.slots:
            fits = wanted == slot.index if wanted is not None else slot.fits(kind)
            if slot.index not in self.holders and fits:
                self.holders[slot.index] = job_id
                return slot
        return None

    def price_for(self, asks: Resources, whole: int) -> int:
        """Lovelace per second of the slot a job asking `asks` would take: the smallest slice
        a fraction fits (`whole`, the bundle's price, when none does or for a whole job)."""
        fitting = sorted((slot for slot in self.slots if slot.fits(asks)), key=slot_size)
        price = fitting[0].price_per_unit if fitting else None
        return whole if price is None else price

    def free_for(self, asks: Resources) -> int:
        """Free slots a job asking `asks` could take."""
        return sum(slot.fits(asks) for slot in self.slots if slot.index not in self.holders)

    def release(self, job_id: str) -> None:
        self.holders = {index: job for index, job in self.holders.items() if job != job_id}


def slot_size(slot: Slot) -> tuple[int, int, int]:
    """Slots in the order a job tries them: whole slots as listed, then slices, smallest
    first (a small fraction does not take a large slice while a small one is free)."""
    piece = slot.gpu_slice
    return (0, 0, slot.index) if piece is None else (piece.sm_percent, piece.memory_mib, slot.index)
