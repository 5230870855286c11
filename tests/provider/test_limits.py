"""Limits fire and are reported: memory (OOM), pids, duration, CPU and the size of /out."""

from __future__ import annotations

from provider.config import RunnerSettings
from provider.sandbox.runner import Runner
from provider.selftest.checks import archive_files, job, log_text


def test_memory_beyond_the_limit_is_an_oom_kill(runner, python):
    spec = job(python, ["python3", "-c", "b = b'x' * (200 << 20)"], memory_mib=64)
    result = runner.run("oom", spec)
    assert result.status == "oom"
    assert result.record.oom_killed and result.exit_code == 137
    assert 60 << 20 < result.record.memory_peak_bytes < 100 << 20  # reached the limit, held


def test_memory_within_the_limit_is_fine_and_its_peak_is_metered(runner, python):
    spec = job(python, ["python3", "-c", "b = b'x' * (100 << 20)"], memory_mib=256)
    result = runner.run("big_but_fits", spec)
    assert result.status == "succeeded" and not result.record.oom_killed
    assert 100 << 20 <= result.record.memory_peak_bytes <= 256 << 20


def test_pids_beyond_the_limit_fail_to_fork_and_the_peak_is_reported(client, tmp_path, busybox):
    runner = Runner(client, RunnerSettings(state_dir=tmp_path / "state", pids_limit=12))
    spec = job(busybox, ["sh", "-c", "for i in $(seq 30); do sleep 3 & done; wait"])
    result = runner.run("fork_bomb", spec)
    assert "can't fork" in log_text(result)
    assert result.record.pids_peak == 12 and result.record.pids_limit == 12
    assert result.record.pids_limit_reached
    assert runner.leftovers() == {"containers": [], "workspaces": [], "cgroups": []}


def test_max_duration_kills_the_job_and_bills_no_more_than_it(runner, busybox):
    result = runner.run("too_long", job(busybox, ["sleep", "30"], seconds=1))
    assert result.status == "timeout" and result.record.timed_out
    assert result.record.wall_ms >= 1000
    assert result.record.billable_units == 1  # capped at the job's max duration


def test_a_job_gets_no_more_cpu_than_its_cores(runner, python):
    burn = "/opt/unchained/workloads/cpu_burn.py"
    spin = f"python3 {burn} 2 & python3 {burn} 2 & python3 {burn} 2; wait"
    result = runner.run("two_spinners", job(python, ["sh", "-c", spin], cpu_cores=1))
    assert result.status == "succeeded"
    record = result.record
    assert record.cpu_ns <= record.wall_ms * 1_000_000 * 1.1  # one core's worth, not three


def test_out_is_capped_at_the_jobs_disk(runner, busybox):
    spec = job(busybox, ["dd", "if=/dev/zero", "of=/out/fill", "bs=1M", "count=20"], disk_mib=4)
    result = runner.run("disk_hog", spec)
    assert result.status == "failed"
    assert "No space left on device" in log_text(result)
    assert 0 < len(archive_files(result.output)["fill"]) <= 4 << 20


def test_sparse_files_cannot_make_the_archive_outgrow_the_jobs_disk(runner, busybox):
    spec = job(busybox, ["sh", "-c", "echo a > /out/a; truncate -s 10G /out/huge"], disk_mib=4)
    result = runner.run("sparse", spec)
    assert result.status == "succeeded" and result.record.billable_units == 1
    assert result.output is None
    assert (
        result.error == f"no output archive: /out holds more than {4 << 20} bytes of file content"
    )
    assert not (runner.results_dir / "sparse" / "out.tar").exists()
