"""The provider's job metrics from a real runner on the docker engine: a container started
counted, one that cannot be made (an image the engine does not have, pulls off) counted as a
failure, and the job's CPU time exported as the sampler reads it from the cgroup."""

from __future__ import annotations

import pytest

from provider import metrics
from provider.metering.cgroups import JobCgroup, parse_mountinfo
from provider.metering.sampler import Sampler
from provider.selftest.checks import job

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


def test_cpu_time_is_exported_as_it_grows(tmp_path):
    """On a stand-in cgroup v2 tree (the files a kernel would write): each tick adds what the
    cgroup's CPU time grew by since the last one."""
    job_dir = tmp_path / "unchained" / "r1_grow"
    job_dir.mkdir(parents=True)
    for name in ("memory.current", "pids.current"):
        (job_dir / name).write_text("1\n")
    fs = parse_mountinfo(f"30 23 0:26 / {tmp_path} rw - cgroup2 cgroup2 rw\n")
    sampler = Sampler(JobCgroup("r1", "grow", fs=fs))
    before = counted("unchained_provider_job_cpu_seconds_total")
    for usec in (1_000_000, 1_000_000, 3_500_000):
        (job_dir / "cpu.stat").write_text(f"usage_usec {usec}\n")
        sampler.tick()
    assert counted("unchained_provider_job_cpu_seconds_total") - before == pytest.approx(3.5)
