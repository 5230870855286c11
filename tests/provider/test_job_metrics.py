"""The provider's job metrics from a real runner on the docker engine: a container started
counted, one that cannot be made (an image the engine does not have, pulls off) counted as a
failure, and the job's CPU time exported as the sampler reads it from the cgroup; a GPU's use
through a FAKE NVML (tests/provider/fake_nvml.py: no GPU here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from provider import metrics
from provider.metering.cgroups import JobCgroup, parse_mountinfo
from provider.metering.gpu import GpuMeter
from provider.metering.sampler import Sampler
from provider.selftest.checks import job
from tests.provider import fake_nvml as fake
from tests.provider.fake_nvml import H100, JOB_PID

BURN = "/opt/unchained/workloads/cpu_burn.py"


def counted(name: str) -> float:
    return metrics.REGISTRY.get_sample_value(name) or 0.0


def test_container_starts_failures_and_cpu_are_counted(runner, python):
    starts, failures = (counted("unchained_provider_container_starts_total"),
                        counted("unchained_provider_container_start_failures_total"))  # fmt: skip
    cpu = counted("unchained_provider_job_cpu_seconds_total")
    result = runner.run("burn", job(python, ["python3", BURN, "1"]))
    assert result.status == "succeeded"
    missing = runner.run("missing", job("unchained-test/absent:never", ["true"]))
    assert missing.status == "error"
    assert counted("unchained_provider_container_starts_total") - starts == 1
    assert counted("unchained_provider_container_start_failures_total") - failures == 1
    exported = counted("unchained_provider_job_cpu_seconds_total") - cpu
    sampled = result.record.samples[-1].cpu_ns / 1e9  # the last sample's reading
    assert exported > 0 and exported == pytest.approx(sampled)


def stand_in_cgroup(tmp_path: Path) -> tuple[JobCgroup, Path]:
    """A stand-in cgroup v2 tree (the files a kernel would write) and its job's folder."""
    job_dir = tmp_path / "unchained" / "r1_grow"
    job_dir.mkdir(parents=True)
    for name, value in {"cpu.stat": "usage_usec 0\n", "memory.current": "1\n",
                        "pids.current": "1\n"}.items():  # fmt: skip
        (job_dir / name).write_text(value)
    fs = parse_mountinfo(f"30 23 0:26 / {tmp_path} rw - cgroup2 cgroup2 rw\n")
    return JobCgroup("r1", "grow", fs=fs), job_dir


def test_cpu_time_is_exported_as_it_grows(tmp_path):
    """Each tick adds what the cgroup's CPU time grew by since the last one."""
    cgroup, job_dir = stand_in_cgroup(tmp_path)
    sampler = Sampler(cgroup)
    before = counted("unchained_provider_job_cpu_seconds_total")
    for usec in (1_000_000, 1_000_000, 3_500_000):
        (job_dir / "cpu.stat").write_text(f"usage_usec {usec}\n")
        sampler.tick()
    assert counted("unchained_provider_job_cpu_seconds_total") - before == pytest.approx(3.5)


def test_fake_nvml_a_gpus_use_is_exported_while_its_job_runs(tmp_path, fake_nvml):
    fake_nvml.samples[H100] = [fake.utilization(JOB_PID, 10**16, 21)]
    cgroup, _ = stand_in_cgroup(tmp_path)
    with GpuMeter([H100], belongs=lambda pid: pid == JOB_PID) as meter:
        sampler = Sampler(cgroup, meter, interval_ms=3_600_000)
        sampler.tick()
        sm = metrics.REGISTRY.get_sample_value("unchained_provider_gpu_sm_percent", {"gpu": H100})
        held = metrics.REGISTRY.get_sample_value(
            "unchained_provider_gpu_job_memory_bytes", {"gpu": H100}
        )
        assert (sm, held) == (21, 2 << 30)
        sampler.start().stop()  # the job ends: its GPU's gauges go back to 0
    assert (
        metrics.REGISTRY.get_sample_value("unchained_provider_gpu_sm_percent", {"gpu": H100}) == 0
    )
