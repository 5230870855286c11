"""Sharing a GPU, against FAKES: a FAKE NVML (tests/provider/fake_nvml.py) and a FAKE
`nvidia-cuda-mps-control` (tests/provider/fake_mps/) that records what it is told. The choice
of isolation, the MPS daemon's commands, the docker options of a job on a slice, and metering
by process (job vs operator) are checked here; the real paths are the `gpu`-marked tests in
test_gpu_sharing.py."""

from __future__ import annotations

import json
from pathlib import Path

import pynvml
import pytest
from docker.models.containers import _create_container_args

from offchain.protocol.job.gpu_slices import FAULT_NOTES, GpuSlice
from offchain.protocol.job.metering import GpuSample, GpuUsage
from provider.config import RunnerSettings
from provider.gpu import mps
from provider.gpu.inventory import GpuInfo, GpuInventory, HostInventory, gpu_inventory
from provider.gpu.share import GpuIsolation, MigInstance, choose, isolation_of, isolator
from provider.metering.gpu import GpuMeter, GpuProcess, gpu_processes
from provider.money.own_transactions import OwnTransactions
from provider.sandbox.hardening import JobMounts, container_options
from provider.selftest.checks import job
from tests.provider import fake_nvml as fake
from tests.provider.conftest import FAKE_MPS
from tests.provider.fake_nvml import A100, H100, JOB_PID, MIG_1, MIG_2, OTHER_PID

GPU = GpuInfo(0, H100, "NVIDIA H100 80GB HBM3", 80 << 30, "9.0", "disabled")


def calls(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_mig_is_chosen_where_enabled_with_instances_else_mps_else_none():
    instances = [MigInstance(MIG_1, 20480)]
    mig = choose(GpuInfo(1, A100, "A100", 40 << 30, "8.0", "enabled"), instances, "/bin/ctl")
    assert (mig.kind, mig.instances, mig.index) == ("mig", (instances[0],), 1)
    assert mig.fault_note == FAULT_NOTES["mig"] and mig.offers_fractions
    made_none = choose(GpuInfo(1, A100, "A100", 40 << 30, "8.0", "enabled"), [], "/bin/ctl")
    assert made_none.kind == "none" and "no MIG instance" in made_none.reason
    shared = choose(GPU, [], "/usr/bin/nvidia-cuda-mps-control")
    assert (shared.kind, shared.fault_note) == ("mps", FAULT_NOTES["mps"])
    assert "MIG disabled" in shared.reason
    alone = choose(GpuInfo(0, H100, "GTX 1080", 8 << 30, "6.1", "unsupported"), [], None)
    assert alone == GpuIsolation(
        H100, 0, "none",
        "no MIG (unsupported) and no nvidia-cuda-mps-control on PATH: no fractions offered",
    )  # fmt: skip
    assert not alone.offers_fractions


def test_fake_nvml_isolation_per_gpu_reads_mig_instances(fake_nvml, fake_mps):
    gpus = list(gpu_inventory().gpus)
    chosen = isolation_of(gpus)  # the fake control program is on PATH
    assert chosen[H100].kind == "mps"
    assert chosen[H100].reason.endswith(f"MPS ({FAKE_MPS / mps.CONTROL})")
    assert chosen[A100].instances == (MigInstance(MIG_1, 20480), MigInstance(MIG_2, 10240))
    assert [isolator(gpu) for gpu in gpus] == [("mps", ()), ("mig", (MIG_1, MIG_2))]


def test_without_the_mps_program_a_gpu_without_mig_offers_no_fractions(fake_nvml, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    chosen = isolation_of(list(gpu_inventory().gpus))
    assert chosen[H100].kind == "none" and "no nvidia-cuda-mps-control" in chosen[H100].reason
    assert chosen[A100].kind == "mig"
    assert isolator(gpu_inventory().gpus[0]) == chosen[H100].reason


def test_fake_mps_daemon_starts_under_the_state_dir_and_bounds_new_servers(tmp_path, fake_mps):
    daemon = mps.MpsDaemon(tmp_path / "state")
    assert not daemon.running()
    daemon.start({0: 40960, 2: 20480}, 50)
    daemon.start({0: 40960, 2: 20480}, 50)  # running: not started twice
    assert daemon.pipe_dir == tmp_path / "state" / "mps" / "pipe" and daemon.log_dir.is_dir()
    assert daemon.pipe_dir.stat().st_mode & 0o777 == 0o755
    daemon.stop()
    daemon.stop()  # stopped: nothing to say
    seen = calls(fake_mps)
    assert {c["pipe"] for c in seen} == {str(daemon.pipe_dir)}
    assert {c["log_dir"] for c in seen} == {str(daemon.log_dir)}
    said = [" ".join(c["argv"]) or c["lines"][0] for c in seen]
    bound = ["set_default_device_pinned_mem_limit 0 40960M",
             "set_default_device_pinned_mem_limit 2 20480M",
             "set_default_active_thread_percentage 50"]  # fmt: skip
    assert said == [
        "get_server_list", "get_server_list", "-d", "get_server_list", *bound,
        "get_server_list", *bound,
        "get_server_list", "quit", "get_server_list",
    ]  # fmt: skip


def test_fake_mps_daemon_that_cannot_start_says_why(tmp_path, fake_mps, monkeypatch):
    monkeypatch.setenv("FAKE_MPS_BROKEN", "1")
    with pytest.raises(mps.MpsError, match="-d"):
        mps.MpsDaemon(tmp_path).start({0: 1024}, 25)
    monkeypatch.setenv("PATH", "/nonexistent")
    assert mps.control_binary() is None
    with pytest.raises(mps.MpsError, match="No such file"):
        mps.MpsDaemon(tmp_path).command("get_server_list")


MPS_SLICE = GpuSlice(H100, 0, "NVIDIA H100 80GB HBM3", 1, 10240, 25, "mps")
MIG_SLICE = GpuSlice(A100, 1, "NVIDIA A100-SXM4-40GB", 0, 20480, 43, "mig", MIG_1)


def slice_options(
    tmp_path: Path, piece: GpuSlice | None, env: dict[str, str], pipe: Path | None = None
) -> dict:
    """The create request (as docker-py encodes it) of a job on `piece`; the spec's env is set
    past validation, which refuses CUDA_MPS_* and NVIDIA_* names, to show the provider's win."""
    spec = job("unchained/busybox:any", ["true"]).model_copy(update={"env": env})
    options = container_options(
        "r1", "slice_job", spec, spec.image, JobMounts(tmp_path, None), [], "/unchained/r1_s",
        RunnerSettings(state_dir=tmp_path), piece, pipe,
    )  # fmt: skip
    return _create_container_args({**options, "version": "1.41"})


def test_a_job_on_an_mps_slice_gets_the_limits_after_its_own_env_and_the_pipe(tmp_path):
    pipe = tmp_path / "pipe"
    raise_ = {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "100", "NVIDIA_VISIBLE_DEVICES": "all",
              "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=80000M", "MINE": "1"}  # fmt: skip
    args = slice_options(tmp_path, MPS_SLICE, raise_, pipe)
    env = args["environment"]
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=10240M"
    assert env["CUDA_MPS_PIPE_DIRECTORY"] == mps.PIPE_IN_CONTAINER
    assert env["NVIDIA_VISIBLE_DEVICES"] == H100 and env["MINE"] == "1"
    host = args["host_config"]
    assert host["DeviceRequests"][0]["DeviceIDs"] == [H100]
    assert host["IpcMode"] == "host"
    mounted = [m for m in host["Mounts"] if m["Target"] == mps.PIPE_IN_CONTAINER]
    assert [(m["Source"], m["Type"]) for m in mounted] == [(str(pipe), "bind")]
    assert host["ReadonlyRootfs"] and host["CapDrop"] == ["ALL"]  # still hardened


def test_the_engine_records_an_mps_slices_options_as_sent(client, busybox, tmp_path):
    pipe = tmp_path / "pipe"
    pipe.mkdir()
    spec = job(busybox, ["true"])
    options = container_options(
        "r1", "mps_job", spec, busybox, JobMounts(tmp_path, None), [], "/unchained/r1_mps_job",
        RunnerSettings(state_dir=tmp_path), MPS_SLICE, pipe,
    )  # fmt: skip
    container = client.containers.create(**options)
    try:
        host = container.attrs["HostConfig"]
        assert host["IpcMode"] == "host" and host["DeviceRequests"][0]["DeviceIDs"] == [H100]
        assert any(m["Source"] == str(pipe) and m["Target"] == mps.PIPE_IN_CONTAINER
                   for m in host["Mounts"])  # fmt: skip
        env = container.attrs["Config"]["Env"]
        assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25" in env
        assert "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=10240M" in env
    finally:
        container.remove(force=True)


def test_a_job_on_a_mig_slice_gets_the_instance_and_nothing_of_mps(tmp_path):
    args = slice_options(tmp_path, MIG_SLICE, {}, tmp_path)
    assert args["host_config"]["DeviceRequests"][0]["DeviceIDs"] == [MIG_1]
    assert not any(item.startswith("CUDA_MPS") for item in args["environment"])
    assert "IpcMode" not in args["host_config"]
    whole = slice_options(tmp_path, None, {})
    assert "IpcMode" not in whole["host_config"] and len(whole["host_config"]["Mounts"]) == 1


def test_an_mps_grant_without_the_daemons_pipe_is_a_bug(tmp_path):
    with pytest.raises(ValueError, match="pipe"):
        slice_options(tmp_path, MPS_SLICE, {})


def test_fake_nvml_a_slice_is_metered_by_process_without_the_devices_energy(fake_nvml):
    fake_nvml.samples[H100] = [
        fake.utilization(JOB_PID, 10**16, 21, memory_util=7),
        fake.utilization(OTHER_PID, 10**16 + 1, 70, memory_util=40),  # the operator's miner
    ]
    fake_nvml.accounting[H100] = {JOB_PID: fake.accounting(19, 6, 3 << 30)}
    with GpuMeter([H100], belongs=lambda pid: pid == JOB_PID, shared=True) as meter:
        sample = meter.sample(100)
        usage = meter.usage()
        share = meter.share("mps", 10240, 25)
    assert sample == [GpuSample(100, H100, 2 << 30, 21, None)]
    assert usage == [GpuUsage(H100, None, 2 << 30, 21, 1)]
    assert share.model_dump() == {
        "uuid": H100, "isolation": "mps", "memory_mib": 10240, "sm_percent": 25,
        "memory_util_peak": 7, "accounting_gpu_percent": 19,
        "accounting_memory_peak_bytes": 3 << 30,
    }  # fmt: skip


def test_fake_nvml_without_accounting_the_share_says_none(fake_nvml):
    fake_nvml.processes[A100] = [fake.process(JOB_PID, 1 << 30)]
    with GpuMeter([A100], belongs=lambda pid: pid == JOB_PID, shared=True) as meter:
        meter.sample(0)  # MIG: no utilization samples at all
        share = meter.share("mig", 20480, 43)
    assert (share.memory_util_peak, share.accounting_gpu_percent) == (None, None)
    assert share.accounting_memory_peak_bytes is None


def test_fake_nvml_processes_outside_every_job_are_the_operators(fake_nvml):
    fake_nvml.samples[H100] = [fake.utilization(OTHER_PID, 2**62, 88)]
    found = gpu_processes([H100, A100], is_job=lambda pid: pid == JOB_PID)
    assert found == [
        GpuProcess(H100, JOB_PID, 2 << 30, None, True),
        GpuProcess(H100, OTHER_PID, 1 << 30, 88, False),
    ]


def test_fake_mps_daemon_is_started_for_the_mps_slices_only(tmp_path, fake_mps):
    assert mps.start_for(tmp_path, [MIG_SLICE]) is None and calls(fake_mps) == []
    bigger = GpuSlice(H100, 0, "NVIDIA H100 80GB HBM3", 2, 20480, 40, "mps")
    daemon = mps.start_for(tmp_path, [MPS_SLICE, bigger, MIG_SLICE])
    assert daemon is not None and daemon.running()
    said = [c["lines"][0] for c in calls(fake_mps) if c["lines"]]
    assert said[-3:-1] == [
        "set_default_device_pinned_mem_limit 0 20480M", "set_default_active_thread_percentage 40",
    ]  # fmt: skip


def test_fake_nvml_status_shows_the_operators_gpu_work_apart_from_jobs(
    fake_nvml, tmp_path, monkeypatch
):
    from pycardano import ScriptHash

    from provider.daemon import status
    from provider.daemon.bond import BondView
    from provider.daemon.journal import Journal
    from provider.money.channel_book import ChannelBook

    monkeypatch.setattr(status, "in_any_job", lambda pid, containers: pid == JOB_PID)
    fake_nvml.samples[H100] = [fake.utilization(OTHER_PID, 2**62, 64)]
    gpus = status.host_gpu_processes(gpu_inventory_host())
    book = ChannelBook.in_state_dir(tmp_path, 0, ScriptHash(bytes(28)), 0)
    own = OwnTransactions.in_state_dir(tmp_path)
    now = status.provider_status(Journal(tmp_path), [], 0, BondView(None, 0, None), book, own, gpus)
    assert [(p["pid"], p["owner"]) for p in now["gpu_processes"]] == [
        (JOB_PID, "job"), (OTHER_PID, "operator"),
    ]  # fmt: skip
    lines = status.status_lines(now)
    assert (
        f"gpu {H100} process {OTHER_PID} (the operator's own, not billed): 1024 MiB, SMs 64%"
        in lines
    )
    assert f"gpu {H100} process {JOB_PID} (a job's): 2048 MiB, SMs ?" in lines
    fake_nvml.init_error = pynvml.NVMLError_DriverNotLoaded()
    assert status.host_gpu_processes(gpu_inventory_host()) == []


def gpu_inventory_host() -> HostInventory:
    return HostInventory(1, 1 << 30, 1 << 30, 1 << 30, GpuInventory((GPU,)))


def test_the_evidence_hash_commits_to_the_jobs_share_and_old_records_keep_theirs():
    from offchain.protocol.job.metering import GpuShare, MeteringRecord
    from tests.market.records import metering

    whole = metering("job_a", 3)
    assert b"gpu_share" not in whole.canonical_json()  # a record of before keeps its bytes
    share = GpuShare(uuid=H100, isolation="mps", memory_mib=10240, sm_percent=25,
                     memory_util_peak=7)  # fmt: skip
    shared = whole.model_copy(update={"gpu_share": share})
    assert b'"gpu_share":{"accounting_gpu_percent":null' in shared.canonical_json()
    assert shared.digest() != whole.digest()
    again = MeteringRecord.model_validate_json(shared.canonical_json())
    assert again.digest() == shared.digest() and again.gpu_share == share


def test_the_explorers_chart_draws_a_slice_jobs_sm_use_of_its_share():
    from offchain.market.explorer.format import usage_chart
    from offchain.protocol.job.metering import GpuShare
    from tests.market.records import metering

    share = GpuShare(uuid=H100, isolation="mps", memory_mib=10240, sm_percent=25,
                     memory_util_peak=None)  # fmt: skip
    samples = [GpuSample(0, H100, 1 << 30, 5, None), GpuSample(1000, H100, 1 << 30, 25, None)]
    record = metering("job_a", 1).model_copy(update={"gpu_share": share, "gpu_samples": samples})
    (gpu,) = [s for s in usage_chart(record.model_dump(mode="json")) if s["key"] == "gpu"]
    assert gpu["label"] == "GPU (SM, of its 25% slice)"
    assert gpu["points"].endswith(",0")  # 25% of the GPU: its whole slice, the chart's top


def test_a_job_on_a_slice_is_kept_with_its_slice_for_recovery():
    from provider.sandbox.runner import JobFile

    spec = job("unchained/busybox:any", ["true"], gpu_memory_mib=10240, gpu_sm_percent=25)
    kept = JobFile(spec=spec, gpu_uuids=[], gpu_slice=MIG_SLICE)
    again = JobFile.model_validate_json(kept.model_dump_json())
    assert again == kept and again.gpu_slice.device == MIG_1


def test_without_the_nvidia_runtime_a_slice_job_cannot_start_and_leaves_nothing(runner, busybox):
    spec = job(busybox, ["true"], gpu_memory_mib=10240, gpu_sm_percent=25)
    with pytest.raises(ValueError, match="not both"):
        runner.run("both_job", spec.model_copy(update={"resources": spec.resources.model_copy(
            update={"gpus": 1})}), [H100], gpu_slice=MPS_SLICE)  # fmt: skip
    for asks, piece in ((spec, None), (job(busybox, ["true"]), MPS_SLICE),
                        (job(busybox, ["true"], gpu_memory_mib=20480, gpu_sm_percent=25),
                         MPS_SLICE)):  # fmt: skip
        with pytest.raises(ValueError, match="fraction"):
            runner.run("unfit_job", asks, [], gpu_slice=piece)
    result = runner.run("slice_job", spec, [], gpu_slice=MPS_SLICE)
    assert result.status == "error" and result.record is None
    assert runner.leftovers() == {"containers": [], "workspaces": [], "cgroups": []}


def test_a_process_in_a_service_or_pod_container_is_a_renters_not_the_operators(client, busybox):
    import os

    from provider.daemon.status import renter_containers
    from provider.metering.cgroups import cgroup_of, in_any_job
    from provider.sandbox.hardening import LABEL_RUNNER

    mine = cgroup_of(os.getpid())
    assert mine is not None and not in_any_job(os.getpid())  # this test: not in a job
    assert in_any_job(os.getpid(), [mine.rsplit("/", 1)[-1] or "/"])
    service = client.containers.run(busybox, ["sleep", "30"], labels={LABEL_RUNNER: "r1"},
                                    detach=True)  # fmt: skip
    try:
        assert service.id in renter_containers()
    finally:
        service.remove(force=True)
