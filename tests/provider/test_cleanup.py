"""Every way a job can end, the runner's own failures included, leaves no container, /out
filesystem, workspace or cgroup behind (checked by label, mount table and cgroup tree)."""

from __future__ import annotations

import pytest

from provider.sandbox import runner as runner_module
from provider.sandbox.outvolume import OutVolume
from provider.sandbox.runner import Runner
from provider.selftest.checks import job
from tests.provider.conftest import assert_no_leftovers

FAKE_GPU = "GPU-00000000-1111-2222-3333-444444444444"


def test_a_missing_image_is_an_error_when_pulling_is_off(client, settings, busybox):
    runner = Runner(client, settings.model_copy(update={"pull_images": False}))
    result = runner.run("no_image", job("unchained/not-built:1", ["true"]))
    assert result.status == "error" and "is not on this machine" in result.error
    assert_no_leftovers(runner)


def test_a_missing_image_that_no_registry_serves_is_an_error(client, settings):
    runner = Runner(client, settings.model_copy(update={"pull_images": True}))
    result = runner.run("no_registry", job("unchained/not-built:1", ["true"]))
    assert result.status == "error" and "could not be pulled" in result.error
    assert_no_leftovers(runner)


def test_a_start_the_engine_refuses_is_an_error_and_the_created_container_goes(runner, busybox):
    """Without an NVIDIA runtime the engine creates the container, then refuses to start it."""
    result = runner.run("gpu_here", job(busybox, ["true"], gpus=1), [FAKE_GPU])
    assert result.status == "error" and "could not select device driver" in result.error
    assert result.record is None  # nothing ran: nothing to bill
    assert_no_leftovers(runner)


def test_a_command_that_does_not_exist_fails_with_127(runner, busybox):
    result = runner.run("no_command", job(busybox, ["/no/such/program"]))
    assert result.status == "failed" and result.exit_code == 127
    assert_no_leftovers(runner)


def test_the_runner_failing_while_packing_still_cleans_up(runner, busybox, monkeypatch):
    def broken_pack(self, destination, max_bytes):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(OutVolume, "pack", broken_pack)
    with pytest.raises(RuntimeError, match="disk on fire"):
        runner.run("pack_fails", job(busybox, ["true"]))
    assert_no_leftovers(runner)


def test_an_interrupt_while_the_job_runs_kills_and_removes_it(runner, busybox, monkeypatch):
    def interrupted_wait(container, seconds):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner_module, "_wait", interrupted_wait)
    with pytest.raises(KeyboardInterrupt):
        runner.run("interrupted", job(busybox, ["sleep", "30"]))
    assert_no_leftovers(runner)


def test_out_failing_to_build_removes_the_container_made_beside_it(runner, busybox, monkeypatch):
    def broken_create(self, size_mib, uid, gid):
        raise OSError("mkfs.ext4 failed")

    monkeypatch.setattr(OutVolume, "create", broken_create)
    with pytest.raises(OSError, match="mkfs"):
        runner.run("no_out", job(busybox, ["true"]))
    assert_no_leftovers(runner)


def test_a_job_id_runs_once(runner, busybox):
    assert runner.run("once", job(busybox, ["true"])).status == "succeeded"
    with pytest.raises(ValueError, match="already run"):
        runner.run("once", job(busybox, ["true"]))
    assert (runner.results_dir / "once" / "out.tar").exists()  # the first run's results stay


def test_the_gpus_given_must_match_the_spec(runner, busybox):
    with pytest.raises(ValueError, match="asks for 1 GPUs, 0 given"):
        runner.run("gpu_count", job(busybox, ["true"], gpus=1))


def test_volumes_an_image_declares_go_with_the_container(runner, client, busybox):
    holder = client.containers.create(busybox, ["true"])
    image = holder.commit("unchained/test-volume", "1", changes=["VOLUME /data"])
    holder.remove()
    before = {volume.id for volume in client.volumes.list()}
    try:
        result = runner.run(
            "declares_volume", job("unchained/test-volume:1", ["ls", "-d", "/data"])
        )
        assert result.status == "succeeded"
        assert {volume.id for volume in client.volumes.list()} == before
    finally:
        client.images.remove(image.id, force=True)
