"""The metering record: what one job used, as the provider's receipt commits to it.

The provider writes it (provider/metering/sampler.py samples a job's cgroup and GPUs); the market,
the consumer and the explorer read it back and check its sha256 against the receipt's
evidence hash. Integers only: times in ms, memory in bytes, energy in mJ.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict


@dataclass(frozen=True)
class GpuSample:
    t_ms: int
    uuid: str
    memory_bytes: int  # held by the job's processes
    sm_percent: int | None  # busiest job process since the last sample; None: NVML had no sample
    energy_mj: (
        int | None
    )  # whole device since metering began (the GPU is reserved); None: unsupported


@dataclass(frozen=True)
class GpuUsage:
    uuid: str
    energy_mj: int | None
    memory_peak_bytes: int
    sm_percent_peak: int | None
    processes: int  # distinct job PIDs seen on the device


class GpuShare(BaseModel):
    """The job ran on a slice of a shared GPU: the slice, and what the job's own processes used
    of it (NVML per process; never the whole GPU's figures, which include other tenants and the
    operator's own work). The GPU samples and usage then carry no device energy."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    uuid: str  # the GPU (MPS) or MIG instance the slice is
    isolation: str  # "mig" | "mps"
    memory_mib: int  # the slice's memory limit
    sm_percent: int  # the slice's share of the SMs
    memory_util_peak: int | None  # busiest memory-bandwidth % of a job process; None: no sample
    # the driver's accounting over the job's processes' lives, where it is enabled; else None
    accounting_gpu_percent: int | None = None
    accounting_memory_peak_bytes: int | None = None


class Sample(BaseModel):
    model_config = ConfigDict(frozen=True)

    t_ms: int  # since metering began
    cpu_ns: int
    memory_bytes: int
    pids: int


class MeteringRecord(BaseModel):
    """What one job used: evidence (CPU, memory, GPU, samples) and the billed units."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: int = 1
    job_id: str
    image_id: str  # the engine's id of the image that ran (its config's digest)
    gpu_uuids: list[str]
    cpu_cores: int
    memory_mib: int
    disk_mib: int
    started_at_ms: int
    finished_at_ms: int
    wall_ms: int
    billable_units: int
    exit_code: int
    oom_killed: bool
    timed_out: bool
    cpu_ns: int
    memory_peak_bytes: int
    pids_peak: int
    pids_limit: int
    gpu_usage: list[GpuUsage]
    sample_interval_ms: int
    samples: list[Sample]
    gpu_samples: list[GpuSample]
    gap: bool  # the runner was down for part of the job: samples are missing, totals are not
    # the registry's digest of the image that ran (`host/repo@sha256:...`) when the spec named
    # the image by digest: pulled and checked against it; None for a provider's local image
    image_digest: str | None = None
    gpu_share: GpuShare | None = None  # a slice of a shared GPU, not whole GPUs

    @property
    def pids_limit_reached(self) -> bool:
        return self.pids_peak >= self.pids_limit

    def canonical_json(self) -> bytes:
        """Sorted keys, no spaces, ASCII: the same bytes for the same record, anywhere. A
        record without an image digest (or GPU share) leaves the key out: its bytes (and the
        evidence hash a receipt signed) are what they were before records could name one."""
        exclude = {k for k in ("image_digest", "gpu_share") if getattr(self, k) is None} or None
        return json.dumps(
            self.model_dump(mode="json", exclude=exclude), sort_keys=True, separators=(",", ":"),
            ensure_ascii=True,
        ).encode()  # fmt: skip

    def digest(self) -> str:
        """Hex sha256 of the canonical JSON: the receipt's evidence hash."""
        return hashlib.sha256(self.canonical_json()).hexdigest()
