"""A runner killed mid-job (SIGKILL: no finally runs) recovers when it starts again: it finishes
the jobs that survived and reaps everything else, by label."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

from provider.metering.cgroups import JobCgroup
from provider.sandbox.hardening import LABEL_JOB, LABEL_RUNNER, container_name
from provider.sandbox.outvolume import OutVolume
from provider.sandbox.runner import Runner
from provider.selftest.checks import archive_files, job, log_text
from tests.provider.conftest import assert_no_leftovers

RUNNER_PROCESS = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    import docker
    from offchain.protocol.job.jobspec import JobSpec
    from provider.config import RunnerSettings
    from provider.sandbox.runner import Runner

    runner = Runner(docker.from_env(), RunnerSettings(state_dir=Path(sys.argv[1])))
    spec = JobSpec.model_validate_json(sys.argv[3])
    runner.run(sys.argv[2], spec, on_log=lambda text: print(text, end="", flush=True))
    """
)


def kill_runner_mid_job(settings, job_id, spec) -> None:
    """Start a runner process, wait until the job says it started, then SIGKILL the runner."""
    process = subprocess.Popen(
        [sys.executable, "-c", RUNNER_PROCESS, str(settings.state_dir), job_id,
         spec.model_dump_json()],
        stdout=subprocess.PIPE, text=True, cwd=os.getcwd(),
    )  # fmt: skip
    assert process.stdout is not None
    assert process.stdout.readline() == "started\n"
    os.kill(process.pid, signal.SIGKILL)
    process.wait()


def test_a_job_that_outlives_its_runner_is_finished_by_the_next_one(client, settings, busybox):
    command = "echo started; sleep 1.5; echo done > /out/result; echo finished"
    kill_runner_mid_job(settings, "survivor", job(busybox, ["sh", "-c", command], seconds=30))
    runner = Runner(client, settings)  # the same state directory: the same runner
    container = client.containers.get(container_name(runner.runner_id, "survivor"))
    assert container.status == "running"

    results = runner.recover()
    assert [r.job_id for r in results] == ["survivor"]
    result = results[0]
    assert result.status == "succeeded" and result.record.gap  # samples missed while down
    assert result.record.cpu_ns > 0 and result.record.billable_units == 2
    assert archive_files(result.output) == {"result": b"done\n"}
    assert log_text(result) == "started\nfinished\n"
    assert_no_leftovers(runner)


def test_a_surviving_job_past_its_deadline_is_killed_on_recovery(client, settings, busybox):
    kill_runner_mid_job(
        settings, "overdue", job(busybox, ["sh", "-c", "echo started; sleep 60"], 1)
    )
    (result,) = Runner(client, settings).recover()
    assert result.status == "timeout" and result.record.billable_units == 1
    assert_no_leftovers(Runner(client, settings))


def test_pieces_without_a_job_are_reaped(client, settings, busybox):
    runner = Runner(client, settings)
    # a labelled container whose workspace is gone
    labels = {LABEL_RUNNER: runner.runner_id, LABEL_JOB: "orphan_container"}
    client.containers.create(busybox, ["sleep", "60"], labels=labels)
    # a workspace with its /out mounted, and no container (a crash before create)
    volume = OutVolume(settings.state_dir / "jobs" / "orphan_mount")
    volume.mountpoint.mkdir(parents=True)
    volume.create(4, 65534, 65534)
    # a job cgroup nobody uses any more
    cgroup = JobCgroup(runner.runner_id, "orphan_cgroup")
    cgroup.fs.controller("memory").directory(cgroup.path).mkdir(parents=True)
    results = {r.job_id: r.status for r in runner.recover()}
    assert results == {
        "orphan_container": "reaped",
        "orphan_mount": "reaped",
        "orphan_cgroup": "reaped",
    }
    assert_no_leftovers(runner)


def test_a_job_created_but_never_started_is_reaped_not_billed(client, settings, busybox):
    runner = Runner(client, settings)
    (settings.state_dir / "jobs" / "never").mkdir(parents=True)
    spec = job(busybox, ["true"])
    (settings.state_dir / "jobs" / "never" / "job.json").write_text(
        f'{{"spec": {spec.model_dump_json()}, "gpu_uuids": []}}'
    )
    labels = {LABEL_RUNNER: runner.runner_id, LABEL_JOB: "never"}
    client.containers.create(busybox, ["true"], labels=labels)
    (result,) = runner.recover()
    assert (result.status, result.error, result.record) == ("reaped", "never started", None)
    assert_no_leftovers(runner)


def test_a_job_whose_results_were_saved_is_only_cleaned_up(client, settings, busybox):
    runner = Runner(client, settings)
    first = runner.run("saved", job(busybox, ["sh", "-c", "echo x > /out/x"]))
    (settings.state_dir / "jobs" / "saved").mkdir()  # as if the crash came during cleanup
    (again,) = runner.recover()
    assert again == first
    assert_no_leftovers(runner)
