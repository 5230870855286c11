"""Metering: samples of a job's cgroup (and GPUs) at 10 Hz, for the record a receipt commits to
(`offchain.protocol.job.metering`, read by every party).

The sampler reads cgroup files directly (a `docker stats` call per tick would cost far more
than 1% of a core). Totals come from the job's parent cgroup after exit, so CPU time and peak
memory are exact whatever the sampling missed. The record's sha256 over canonical JSON is the
receipt's evidence hash; billable units are seconds of the reserved bundle, rounded up.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime

from offchain.protocol.job.metering import GpuSample, Sample
from provider import metrics
from provider.metering.cgroups import JobCgroup
from provider.metering.gpu import GpuMeter

SAMPLE_INTERVAL_MS = 100
MAX_SAMPLES = 36_000  # an hour at 10 Hz; longer jobs keep every 2nd, 4th, ... sample


def billable_units(wall_ms: int, max_duration_s: int) -> int:
    """Seconds of the reserved bundle, rounded up: at least one for a job that started, never
    more than the job's max duration."""
    return min(max(1, -(-wall_ms // 1000)), max_duration_s)


def wall_ms(started_ns: int, finished_ns: int) -> int:
    """Milliseconds from start to exit, rounded up. The engine stamps StartedAt once the start
    call returns, so a job of a few milliseconds can seem to end before it began: that is 0."""
    return max(0, -(-(finished_ns - started_ns) // 1_000_000))


def docker_time_ns(stamp: str) -> int:
    """POSIX nanoseconds of an engine timestamp such as 2026-01-02T03:04:05.123456789Z."""
    whole, _, fraction = stamp.rstrip("Z").partition(".")
    seconds = datetime.strptime(whole, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC).timestamp()
    return int(seconds) * 1_000_000_000 + int((fraction or "0").ljust(9, "0")[:9])


class Sampler:
    """A thread that samples a job's cgroup (and GPUs) every interval until stopped."""

    def __init__(
        self,
        cgroup: JobCgroup,
        gpu: GpuMeter | None = None,
        interval_ms: int = SAMPLE_INTERVAL_MS,
        max_samples: int = MAX_SAMPLES,
    ) -> None:
        self.cgroup = cgroup
        self.gpu = gpu
        self.base_interval_ms = interval_ms
        self.max_samples = max_samples
        self.stride = 1  # keep every stride-th tick
        self.samples: list[Sample] = []
        self.gpu_samples: list[GpuSample] = []
        self.pids_peak = 0
        self.thread_cpu_ns = 0  # the sampler's own CPU time, for the benchmark
        self._ticks = 0
        self._cpu_ns = 0  # the cgroup's CPU time at the last tick (exported as it grows)
        self._gpus: set[str] = set()  # GPUs a sample named (their gauges cleared at the end)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="metering", daemon=True)
        self._t0 = time.monotonic_ns()

    @property
    def interval_ms(self) -> int:
        return self.base_interval_ms * self.stride

    def start(self) -> Sampler:
        self._t0 = time.monotonic_ns()
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop sampling (again is fine)."""
        self._stop.set()
        self._thread.join()
        for uuid in self._gpus:  # no job of this sampler holds them now
            metrics.GPU_SM.labels(uuid).set(0)
            metrics.GPU_MEMORY.labels(uuid).set(0)

    def _export(self, cpu_ns: int, gpu_samples: list[GpuSample]) -> None:
        """Every tick into the provider's metrics: the CPU time since the last tick, and each
        GPU's latest use."""
        metrics.JOB_CPU.inc(max(0, cpu_ns - self._cpu_ns) / 1e9)
        self._cpu_ns = max(self._cpu_ns, cpu_ns)
        for gpu in gpu_samples:
            self._gpus.add(gpu.uuid)
            if gpu.sm_percent is not None:
                metrics.GPU_SM.labels(gpu.uuid).set(gpu.sm_percent)
            metrics.GPU_MEMORY.labels(gpu.uuid).set(gpu.memory_bytes)

    def _loop(self) -> None:
        period = self.base_interval_ms / 1000
        next_tick = time.monotonic()
        while True:
            self.tick()
            self.thread_cpu_ns = time.thread_time_ns()
            next_tick += period
            if self._stop.wait(max(0.0, next_tick - time.monotonic())):
                return

    def tick(self) -> None:
        """One sample, kept when this tick falls on the stride; the PIDs peak counts every tick."""
        t_ms = (time.monotonic_ns() - self._t0) // 1_000_000
        try:
            sample = Sample(
                t_ms=t_ms,
                cpu_ns=self.cgroup.cpu_ns(),
                memory_bytes=self.cgroup.memory_bytes(),
                pids=self.cgroup.pids(),
            )
        except FileNotFoundError:  # not created yet, or already gone
            return
        self.pids_peak = max(self.pids_peak, sample.pids)
        keep = self._ticks % self.stride == 0
        self._ticks += 1
        gpu_samples = self.gpu.sample(t_ms) if self.gpu is not None else []
        self._export(sample.cpu_ns, gpu_samples)
        if not keep:
            return
        self.samples.append(sample)
        self.gpu_samples.extend(gpu_samples)
        if len(self.samples) >= self.max_samples:
            self.samples = self.samples[::2]
            kept = {s.t_ms for s in self.samples}
            self.gpu_samples = [s for s in self.gpu_samples if s.t_ms in kept]
            self.stride *= 2
