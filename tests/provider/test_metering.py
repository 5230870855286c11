"""Metering: exact CPU time and peaks from the job's cgroup, 10 Hz samples, the record's
digest and the billable units."""

from __future__ import annotations

import json
import os
import threading

import pytest

from offchain.protocol.job.metering import MeteringRecord
from provider.metering.cgroups import JobCgroup, parse_mountinfo
from provider.metering.sampler import Sampler, billable_units, docker_time_ns, wall_ms
from provider.sandbox.hardening import container_name
from provider.selftest.checks import job, log_text

BURN = "/opt/unchained/workloads/cpu_burn.py"


def test_metered_cpu_time_is_within_5_percent_of_what_the_workload_measures(runner, python):
    result = runner.run("cpu_burn", job(python, ["python3", BURN, "3"]))
    assert result.status == "succeeded"
    own_account = json.loads(log_text(result))["cpu_ns"]  # os.times() inside the container
    metered = result.record.cpu_ns
    print(f"metered {metered} ns, workload's own {own_account} ns")
    assert abs(metered - own_account) <= 0.05 * own_account, (metered, own_account)


def test_samples_come_from_the_cgroup_while_the_job_runs(runner, python):
    result = runner.run("sampled", job(python, ["python3", BURN, "1"]))
    record = result.record
    assert record.sample_interval_ms == 100
    assert len(record.samples) >= 3
    times = [s.t_ms for s in record.samples]
    cpu = [s.cpu_ns for s in record.samples]
    assert times == sorted(times) and cpu == sorted(cpu)
    assert cpu[-1] <= record.cpu_ns  # the exact total is read after exit
    assert max(s.memory_bytes for s in record.samples) <= record.memory_peak_bytes
    assert max(s.pids for s in record.samples) >= 2  # docker-init and python


def test_wall_time_and_units_come_from_the_engines_clock(runner, busybox):
    record = runner.run("short", job(busybox, ["sleep", "1.5"])).record
    assert record.finished_at_ms - record.started_at_ms in (record.wall_ms, record.wall_ms - 1)
    assert record.billable_units == 2  # 1.5 s, give or take the engine's few milliseconds


def test_the_record_digest_is_over_canonical_json(runner, busybox):
    record = runner.run("digest", job(busybox, ["true"])).record
    again = MeteringRecord.model_validate_json(record.model_dump_json(indent=4))
    assert again.digest() == record.digest()
    assert (
        record.canonical_json()
        == json.dumps(
            json.loads(record.canonical_json()), sort_keys=True, separators=(",", ":")
        ).encode()
    )
    tampered = record.model_copy(update={"cpu_ns": record.cpu_ns + 1})
    assert tampered.digest() != record.digest()


@pytest.mark.parametrize(
    ("ms", "max_s", "units"),
    [(0, 10, 1), (1, 10, 1), (999, 10, 1), (1000, 10, 1), (1001, 10, 2), (61_000, 60, 60)],
)
def test_billable_units_are_whole_seconds_rounded_up_at_least_one_and_capped(ms, max_s, units):
    assert billable_units(ms, max_s) == units


def test_wall_time_rounds_up_and_is_never_negative():
    assert wall_ms(0, 1) == 1 and wall_ms(0, 1_000_000) == 1 and wall_ms(0, 1_000_001) == 2
    assert wall_ms(5_000_000, 4_700_000) == 0  # the engine's StartedAt after a quick exit


def test_engine_timestamps_parse_to_integer_nanoseconds():
    assert docker_time_ns("1970-01-01T00:00:01.5Z") == 1_500_000_000
    assert docker_time_ns("2026-11-21T06:09:55.814464981Z") % 1_000_000_000 == 814_464_981
    assert docker_time_ns("1970-01-01T00:00:02Z") == 2_000_000_000


def test_host_pids_map_to_the_job_through_their_cgroup(runner, busybox, client):
    """NVML reports host PIDs; this is the mapping it relies on, with a real container."""
    seen: dict[str, bool] = {}

    def look(text: str) -> None:
        if "ready" in text and not seen:
            container = client.containers.get(container_name(runner.runner_id, "pid_map"))
            host_pid = container.attrs["State"]["Pid"]
            cgroup = JobCgroup(runner.runner_id, "pid_map")
            seen["job"] = cgroup.contains_pid(host_pid)
            seen["test"] = cgroup.contains_pid(os.getpid())
            seen["other job"] = JobCgroup(runner.runner_id, "other").contains_pid(host_pid)

    result = runner.run("pid_map", job(busybox, ["sh", "-c", "echo ready; sleep 1"]), on_log=look)
    assert result.status == "succeeded"
    assert seen == {"job": True, "test": False, "other job": False}


def test_cgroup_v2_files_are_read_the_v2_way(tmp_path):
    """A stand-in directory tree for a cgroup v2 host (this machine runs v1)."""
    job_dir = tmp_path / "unchained" / "r1_v2job"
    job_dir.mkdir(parents=True)
    (job_dir / "cpu.stat").write_text("usage_usec 1500\nuser_usec 1000\nsystem_usec 500\n")
    (job_dir / "memory.current").write_text("4096\n")
    (job_dir / "memory.peak").write_text("8192\n")
    (job_dir / "pids.current").write_text("3\n")
    fs = parse_mountinfo(f"30 23 0:26 / {tmp_path} rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n")
    cgroup = JobCgroup("r1", "v2job", fs=fs)
    assert fs.version == 2 and cgroup.exists()
    assert (cgroup.cpu_ns(), cgroup.memory_bytes(), cgroup.memory_peak_bytes()) == (
        1_500_000,
        4096,
        8192,
    )
    assert cgroup.pids() == 3 and cgroup.pids_peak() is None  # older kernels: no pids.peak


def test_mountinfo_picks_v1_when_cpuacct_is_mounted_and_names_systemd_slices():
    line = "33 31 0:30 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n"
    fs = parse_mountinfo(line + "41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n")
    assert fs.version == 1
    assert str(fs.controller("cpuacct").mountpoint) == "/sys/fs/cgroup/cpu,cpuacct"
    v2 = parse_mountinfo("30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n")
    slice_job = JobCgroup("r1", "abc", systemd=True, fs=v2)
    assert slice_job.docker_parent == "unchained-r1_abc.slice"
    assert slice_job.path == "/unchained.slice/unchained-r1_abc.slice"


def test_job_ids_that_could_escape_a_path_are_refused():
    for bad in ("../x", "a/b", "", "UPPER", "a-b", "x" * 65):
        with pytest.raises(ValueError, match="job id"):
            JobCgroup("r1", bad)


def test_a_sampler_before_the_cgroup_exists_waits_without_failing():
    sampler = Sampler(JobCgroup("r1", "not_started_yet"), interval_ms=10).start()
    threading.Event().wait(0.1)
    sampler.stop()
    assert sampler.samples == [] and sampler.thread_cpu_ns > 0


def test_long_jobs_keep_every_other_sample_when_the_log_is_full(tmp_path):
    """On a stand-in cgroup v2 tree: the sample log stays bounded, its spacing doubles."""
    job_dir = tmp_path / "unchained" / "r1_long"
    job_dir.mkdir(parents=True)
    for name, value in {"cpu.stat": "usage_usec 1\n", "memory.current": "1\n",
                        "pids.current": "1\n"}.items():  # fmt: skip
        (job_dir / name).write_text(value)
    fs = parse_mountinfo(f"30 23 0:26 / {tmp_path} rw - cgroup2 cgroup2 rw\n")
    sampler = Sampler(JobCgroup("r1", "long", fs=fs), interval_ms=100, max_samples=4)
    for _ in range(10):
        sampler.tick()
    assert sampler.interval_ms == 400 and len(sampler.samples) == 3  # ticks 0, 4, 8
    assert sampler.stride == 4
