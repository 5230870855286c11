"""Fractions of a GPU: the slice a provider carves out of one GPU beside its own work, and the
offer's entry that tells renters what such a slice is.

A slice is a share of one GPU's memory (MiB) and of its SMs (percent), enforced by MIG (the GPU
cut into hardware instances: memory, SMs and faults isolated) or, where MIG is not there, by
NVIDIA MPS (a per-client pinned memory limit and active-thread percentage set by the provider,
but one client's fatal fault hits every client of that GPU). The offer says which in
`isolation` and states the fault model in `fault_note`, so a renter can choose. A GPU with
neither is offered whole or not at all: no fractions.

Shared by the provider (config, capacity, enforcement, self-test) and the market (offers,
matching, explorer). Integers only: MiB, percent, lovelace, GFLOP/s.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from offchain.protocol.job.jobspec import MAX_DURATION_S, MAX_SUPPLY_LOVELACE

Isolation = Literal["mig", "mps"]
ISOLATIONS: tuple[Isolation, ...] = ("mig", "mps")  # in order of preference
MAX_SLICES_PER_GPU = 64  # MIG gives at most 7; MPS up to 48 clients per GPU (Volta+)
MAX_SLICE_OFFERS = 64  # entries in one offer's gpu_slices
MAX_FAULT_NOTE = 300
MAX_GPU_MODEL = 128
MAX_MEMORY_MIB = 1 << 24  # as the job spec's bounds
MAX_PRICE_PER_UNIT = MAX_SUPPLY_LOVELACE // MAX_DURATION_S  # as an offer's price_per_unit
FAULT_NOTES: dict[Isolation, str] = {
    "mig": "MIG: this slice is a hardware GPU instance; its memory, SMs and faults are "
    "isolated from every other slice and from the operator's work.",
    "mps": "MPS: memory and SM share are limited per client, but a fatal GPU fault in any "
    "client (another renter's or the operator's) ends every client on this GPU, this job too.",
}


@dataclasses.dataclass(frozen=True)
class GpuSlice:
    """One slice of one GPU on the provider's machine: what one job gets and how it is held
    to it. Private to the provider (UUIDs never reach the market); the offer shows
    `SliceOffer`s instead."""

    gpu_uuid: str  # the physical GPU (GPU-...)
    gpu_index: int  # its NVML index on the host
    gpu_model: str  # NVML's name, e.g. "NVIDIA H100 80GB HBM3"
    slot: int  # 0..count-1 among this GPU's slices
    memory_mib: int  # the most device memory the job may pin
    sm_percent: int  # 1..100: its share of the SMs (MPS active-thread percentage)
    isolation: Isolation
    mig_uuid: str | None = None  # the MIG instance's UUID (MIG-...) when isolation is "mig"

    def __post_init__(self) -> None:
        if not 1 <= self.sm_percent <= 100:
            raise ValueError(f"sm_percent {self.sm_percent} is not 1..100")
        if self.memory_mib < 1:
            raise ValueError(f"memory_mib {self.memory_mib} is not positive")
        if (self.isolation == "mig") != (self.mig_uuid is not None):
            raise ValueError("a MIG slice names its MIG instance's UUID, an MPS slice none")

    @property
    def device(self) -> str:
        """The device a container is given: the MIG instance, or the whole GPU under MPS."""
        return self.mig_uuid or self.gpu_uuid

    @property
    def fault_note(self) -> str:
        return FAULT_NOTES[self.isolation]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class SliceSelfTest(_Strict):
    """What `unchained provider selftest` measured on one slice: matmul throughput (integer
    GFLOP/s), the memory it could allocate (MiB, up to the slice's limit), and whether an
    allocation past the limit was refused (it must be: else the limit is not enforced)."""

    matmul_gflops: int = Field(ge=0, le=1 << 40)
    alloc_ok_mib: int = Field(ge=0, le=MAX_MEMORY_MIB)
    past_limit_refused: bool


class SliceOffer(_Strict):
    """One entry of an offer's `gpu_slices`: `count` equal slices of one GPU model, each
    `memory_mib` and `sm_percent` of a GPU, held to it by `isolation`, with its fault model
    stated and the latest self-test of such a slice (None: not measured)."""

    gpu_model: str = Field(min_length=1, max_length=MAX_GPU_MODEL)
    memory_mib: int = Field(ge=1, le=MAX_MEMORY_MIB)
    sm_percent: int = Field(ge=1, le=100)
    count: int = Field(ge=1, le=MAX_SLICES_PER_GPU * 64)
    isolation: Isolation
    fault_note: str = Field(min_length=1, max_length=MAX_FAULT_NOTE)
    selftest: SliceSelfTest | None = None

    @model_validator(mode="after")
    def _printable(self) -> SliceOffer:
        for text in (self.gpu_model, self.fault_note):
            if not text.isprintable():
                raise ValueError("gpu_model and fault_note are printable text")
        return self

    def fits(self, memory_mib: int, sm_percent: int) -> bool:
        """Whether one slice gives a job asking `memory_mib` and `sm_percent` of a GPU."""
        return memory_mib <= self.memory_mib and sm_percent <= self.sm_percent

    def describe(self) -> str:
        return (f"{self.count} x {self.memory_mib} MiB / {self.sm_percent}% SMs of "
                f"{self.gpu_model} ({self.isolation})")  # fmt: skip


class SliceTerms(SliceOffer):
    """An offer's `gpu_slices` entry as signed and published: the slice and the price per
    second of a job's whole bundle on one such slice (the slice pro rata, its cores, memory
    and disk), which the quote of a job asking a fraction states."""

    price_per_unit: int = Field(ge=0, le=MAX_PRICE_PER_UNIT)


def cheapest_fit(entries: Iterable[Any], fraction: tuple[int, int] | None) -> SliceTerms | None:
    """Of an offer's `gpu_slices` entries (as signed: mappings, or SliceTerms), the cheapest
    that holds `fraction` (memory MiB, SM percent); None when it asks none or none does.
    The price a job asking that fraction is quoted, by the market and checked by the renter."""
    if fraction is None:
        return None
    read = (e if isinstance(e, SliceTerms) else SliceTerms.model_validate(e) for e in entries)
    fitting = [entry for entry in read if entry.fits(*fraction)]
    return min(fitting, key=lambda entry: entry.price_per_unit, default=None)


def slice_price(gpu_price: int, sm_percent: int) -> int:
    """Lovelace per second of a slice: the whole GPU's price pro rata by its SM share,
    rounded up (integers only: a slice never costs less than its share)."""
    return -(-gpu_price * sm_percent // 100)
