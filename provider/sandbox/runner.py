"""The runner: one job spec in a hardened container, metered, its /out packed, everything removed.

Each job has a workspace (`state_dir/jobs/<job>`: its spec, /out filesystem and inputs), a
labelled container and a parent cgroup. Whatever happens (a bad image, a start refused by the
engine, a limit, the runner's own crash) all three go away: in `run`'s `finally`, or in
`recover` when a restarted runner finds them by label and finishes or reaps them. Results
stay in `state_dir/results/<job>`: out.tar, log.txt and result.json.
"""

from __future__ import annotations

import hashlib
import shutil
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, suppress
from pathlib import Path
from typing import Any, Literal

import docker
import requests
from docker.errors import APIError, DockerException, ImageNotFound, NotFound
from docker.models.containers import Container
from pydantic import BaseModel, ConfigDict

from offchain.core.errors import UnchainedError
from offchain.protocol.job.gpu_slices import GpuSlice
from offchain.protocol.job.jobspec import JobSpec
from offchain.protocol.job.metering import MeteringRecord
from provider import metrics as provider_metrics
from provider.config import RunnerSettings
from provider.gpu.mps import MpsDaemon
from provider.images import recipes as images
from provider.metering import cgroups
from provider.metering.cgroups import JobCgroup
from provider.metering.gpu import GpuMeter
from provider.metering.sampler import Sampler, billable_units, docker_time_ns, wall_ms
from provider.sandbox import egress
from provider.sandbox.hardening import LABEL_JOB, LABEL_RUNNER, JobMounts, container_options
from provider.sandbox.inputs import FetchPolicy, InputError, stage_inputs
from provider.sandbox.outvolume import Archive, OutputTooLarge, OutVolume, is_mounted

Status = Literal["succeeded", "failed", "oom", "timeout", "cancelled", "stopped", "error", "reaped"]
Stop = Literal["cancelled", "stopped"]  # at the renter's request; because the provider stops
LogSink = Callable[[str], None]
CGROUP_REMOVE_TRIES = 50


class JobStartError(UnchainedError, RuntimeError):
    """The job could not start (image, inputs, engine refusal): nothing ran, nothing is billed."""


class JobFile(BaseModel):
    """What a restarted runner needs to finish a job: kept in the workspace while it runs."""

    model_config = ConfigDict(frozen=True)

    spec: JobSpec
    gpu_uuids: list[str]
    escrow: str | None = None  # TXID#IX of the escrow that pays the job, for a recovered run
    gpu_slice: GpuSlice | None = None  # the job's slice of a shared GPU


class RunResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    job_id: str
    status: Status
    exit_code: int | None = None
    error: str | None = None
    record: MeteringRecord | None = None
    output: Archive | None = None
    log_path: Path | None = None
    escrow: str | None = None


def runner_id(state_dir: Path) -> str:
    """A runner is its state directory: the same one after a restart, another for another."""
    return hashlib.sha256(str(state_dir.resolve()).encode()).hexdigest()[:12]


def job_status(exit_code: int, oom_killed: bool, timed_out: bool) -> Status:
    if timed_out:
        return "timeout"
    if oom_killed:
        return "oom"
    return "succeeded" if exit_code == 0 else "failed"


class Runner:
    def __init__(self, client: docker.DockerClient, settings: RunnerSettings) -> None:
        self.client = client
        self.settings = settings
        self.systemd = client.info().get("CgroupDriver") == "systemd"
        self.runner_id = runner_id(settings.state_dir)
        self.jobs_dir = settings.state_dir / "jobs"
        self.results_dir = settings.state_dir / "results"
        self.jobs_dir.mkdir(parents=True, exist_ok=True)
        self.results_dir.mkdir(parents=True, exist_ok=True)
        self.stopped: dict[str, Stop] = {}  # jobs stopped while running, and why
        self.mps_pipe = MpsDaemon(settings.state_dir).pipe_dir  # for jobs on MPS slices

    # -- one job ---------------------------------------------------------------------------

    def run(
        self,
        job_id: str,
        spec: JobSpec,
        gpu_uuids: list[str] | None = None,
        on_log: LogSink | None = None,
        escrow: str | None = None,
        gpu_slice: GpuSlice | None = None,
        on_start: Callable[[], None] | None = None,
        pull_auth: dict[str, str] | None = None,
    ) -> RunResult:
        """Run `spec` to the end (or its max duration) and return what happened; `escrow`
        (TXID#IX) is kept with the job so that a run recovered after a crash can be paid.
        `gpu_slice`: the job runs on that slice of a shared GPU (and on no whole GPU).
        `on_start`: called once its container started (a job paid per second from then).
        `pull_auth`: the renter's registry account for its image's pull (kept nowhere)."""
        gpus = list(gpu_uuids or [])
        if len(gpus) != spec.resources.gpus:
            raise ValueError(f"the spec asks for {spec.resources.gpus} GPUs, {len(gpus)} given")
        if gpu_slice is not None and gpus:
            raise ValueError("a job runs on whole GPUs or on a slice, not both")
        fraction = spec.resources.fraction
        if (fraction is None) != (gpu_slice is None) or (
            fraction is not None and gpu_slice is not None
            and not (fraction[0] <= gpu_slice.memory_mib and fraction[1] <= gpu_slice.sm_percent)
        ):  # fmt: skip
            raise ValueError(f"the spec asks for a GPU fraction {fraction}, slice {gpu_slice}")
        # the cgroup's name checks the job id before anything is made in its name
        cgroup = JobCgroup(self.runner_id, job_id, self.systemd)
        workspace = self.jobs_dir / job_id
        if workspace.exists() or (self.results_dir / job_id).exists():
            raise ValueError(f"job {job_id} has already run here")
        workspace.mkdir()
        job = JobFile(spec=spec, gpu_uuids=gpus, escrow=escrow, gpu_slice=gpu_slice)
        try:
            (workspace / "job.json").write_text(job.model_dump_json())
            try:
                container = self._start(job_id, job, cgroup, workspace, pull_auth)
            except (JobStartError, DockerException) as exc:
                provider_metrics.CONTAINER_FAILURES.inc()
                reason = engine_reason(exc)
                return self._save(
                    RunResult(job_id=job_id, status="error", error=reason, escrow=escrow)
                )
            provider_metrics.CONTAINER_STARTS.inc()
            if job_id in self.stopped:  # stopped while its container was being made
                _kill(container)
            if on_start is not None:
                on_start()
            deadline = time.monotonic() + spec.max_duration_s
            return self._supervise(job_id, job, container, cgroup, deadline, on_log)
        finally:
            self.stopped.pop(job_id, None)
            self._cleanup(job_id)

    def stop(self, job_id: str, why: Stop = "cancelled") -> None:
        """Stop the job at its renter's request ("cancelled") or because its provider stops
        ("stopped"): its container is killed (now, or as soon as it is started) and its run
        ends as usual, metered and billed for the time it ran, what its /out holds packed
        as its results (a training job's last checkpoint), with the status `why`."""
        self.stopped[job_id] = why
        for container in self._containers(job_id):
            _kill(container)

    def stop_all(self) -> list[str]:
        """Stop every job this runner has running, because its provider stops (`stop`); their
        ids."""
        running = sorted({_job_of(c) for c in self._containers()})
        for job_id in running:
            self.stop(job_id, "stopped")
        return running

    def _start(
        self,
        job_id: str,
        job: JobFile,
        cgroup: JobCgroup,
        workspace: Path,
        pull_auth: dict[str, str] | None = None,
    ) -> Container:
        """Inputs, /out and the container (made side by side), then start it."""
        spec = job.spec
        inputs = None
        if spec.inputs:
            inputs = workspace / "in"
            try:
                policy = FetchPolicy.of(self.settings.inputs_deadline_s, self.settings.inputs_allow)
                stage_inputs(spec.inputs, inputs, spec.resources.disk_mib << 20, policy)
            except InputError as exc:
                raise JobStartError(str(exc)) from exc
        if spec.network:
            try:
                egress.create_network(self.client, self.runner_id, job_id)
            except egress.EgressUnavailable as exc:
                raise JobStartError(str(exc)) from exc
        volume = OutVolume(workspace)
        volume.mountpoint.mkdir()
        options = container_options(
            self.runner_id, job_id, spec, spec.image, JobMounts(volume.mountpoint, inputs),
            job.gpu_uuids, cgroup.docker_parent, self.settings, job.gpu_slice, self.mps_pipe,
        )  # fmt: skip
        with ThreadPoolExecutor(1) as pool:
            making_volume = pool.submit(
                volume.create, spec.resources.disk_mib, self.settings.uid, self.settings.gid
            )
            container = create_container(self.client, options, self.settings.pull_images, pull_auth)
            making_volume.result()
        container.start()
        return container

    def _supervise(
        self,
        job_id: str,
        job: JobFile,
        container: Container,
        cgroup: JobCgroup,
        deadline: float,
        on_log: LogSink | None,
        gap: bool = False,
    ) -> RunResult:
        """Meter the running container until it exits or its time is up, then take the results."""
        spec, gpus, piece = job.spec, job.gpu_uuids, job.gpu_slice
        metered = [piece.device] if piece is not None else gpus
        with ExitStack() as stack:
            gpu = None
            if metered:
                meter = GpuMeter(metered, cgroup.contains_pid, shared=piece is not None)
                gpu = stack.enter_context(meter)
            sampler = Sampler(cgroup, gpu).start()
            stack.callback(sampler.stop)
            logs = _follow_logs(container, on_log) if on_log else None
            timed_out = _wait(container, deadline - time.monotonic())
            sampler.stop()
            gpu_usage = gpu.usage() if gpu is not None else []  # while NVML is still open
            share = None
            if gpu is not None and piece is not None:
                share = gpu.share(piece.isolation, piece.memory_mib, piece.sm_percent)
            if logs is not None:
                logs.join(timeout=5)
        container.reload()
        state = container.attrs["State"]
        started_ns = docker_time_ns(state["StartedAt"])
        finished_ns = docker_time_ns(state["FinishedAt"])
        elapsed_ms = wall_ms(started_ns, finished_ns)
        record = MeteringRecord(
            job_id=job_id,
            image_id=container.attrs["Image"],
            gpu_uuids=gpus,
            cpu_cores=spec.resources.cpu_cores,
            memory_mib=spec.resources.memory_mib,
            disk_mib=spec.resources.disk_mib,
            started_at_ms=started_ns // 1_000_000,
            finished_at_ms=finished_ns // 1_000_000,
            wall_ms=elapsed_ms,
            billable_units=billable_units(elapsed_ms, spec.max_duration_s),
            exit_code=state["ExitCode"],
            oom_killed=state["OOMKilled"],
            timed_out=timed_out,
            cpu_ns=cgroup.cpu_ns(),
            memory_peak_bytes=cgroup.memory_peak_bytes(),
            pids_peak=max(cgroup.pids_peak() or 0, sampler.pids_peak),
            pids_limit=self.settings.pids_limit,
            gpu_usage=gpu_usage,
            sample_interval_ms=sampler.interval_ms,
            samples=sampler.samples,
            gpu_samples=sampler.gpu_samples,
            gap=gap,
            image_digest=spec.image if images.by_digest(spec.image) else None,
            gpu_share=share,
        )
        results = self.results_dir / job_id
        results.mkdir(exist_ok=True)
        log_path = results / "log.txt"
        log_path.write_bytes(container.logs(stdout=True, stderr=True))
        volume = OutVolume(self.jobs_dir / job_id)
        if not is_mounted(volume.mountpoint):  # the machine restarted while the job ran
            volume.mount()
        output, problem = None, None
        try:
            output = volume.pack(results / "out.tar", spec.resources.disk_mib << 20)
        except OutputTooLarge as exc:
            problem = f"no output archive: {exc}"
        status = job_status(state["ExitCode"], state["OOMKilled"], timed_out)
        if job_id in self.stopped and not timed_out:
            status = self.stopped[job_id]
        return self._save(
            RunResult(
                job_id=job_id,
                status=status,
                exit_code=state["ExitCode"],
                error=problem,
                record=record,
                output=output,
                log_path=log_path,
                escrow=job.escrow,
            )
        )

    def _save(self, result: RunResult) -> RunResult:
        results = self.results_dir / result.job_id
        results.mkdir(exist_ok=True)
        (results / "result.json").write_text(result.model_dump_json(indent=1))
        return result

    # -- cleanup and recovery --------------------------------------------------------------

    def _cleanup(self, job_id: str) -> None:
        """Remove the job's containers, /out, workspace and cgroup; each step tolerates absence."""
        for container in self._containers(job_id):
            with suppress(NotFound):
                container.remove(force=True, v=True)
        egress.remove_network(self.client, self.runner_id, job_id)
        workspace = self.jobs_dir / job_id
        OutVolume(workspace).remove()
        shutil.rmtree(workspace, ignore_errors=True)
        _remove_cgroup(JobCgroup(self.runner_id, job_id, self.systemd))

    def _containers(self, job_id: str | None = None) -> list[Container]:
        """The job's containers (all jobs' without `job_id`), listed sparse: one cheap call."""
        labels = [
            f"{LABEL_RUNNER}={self.runner_id}",
            LABEL_JOB if job_id is None else f"{LABEL_JOB}={job_id}",
        ]
        return self.client.containers.list(all=True, filters={"label": labels}, sparse=True)

    def leftovers(self) -> dict[str, list[str]]:
        """What this runner's jobs still have here: containers, workspaces, cgroups."""
        return {
            "containers": sorted(_job_of(c) for c in self._containers()),
            "workspaces": sorted(p.name for p in self.jobs_dir.iterdir()),
            "cgroups": cgroups.job_ids(self.runner_id, self.systemd),
        }

    def recover(self, on_log: LogSink | None = None) -> list[RunResult]:
        """After a crash: finish the jobs whose container and workspace survived, reap the rest.

        A finished job gets its results as usual (its record is marked `gap`: samples are
        missing for the time the runner was down, totals are exact). A job whose results were
        already saved is only cleaned up. Anything else of a job is removed, reported "reaped".
        """
        leftovers = self.leftovers()
        job_ids = sorted(set().union(*leftovers.values()))
        containers = {_job_of(c): c for c in self._containers()}
        results = []
        for job_id in job_ids:
            try:
                results.append(self._recover_job(job_id, containers.get(job_id), on_log))
            finally:
                self._cleanup(job_id)
        return results

    def _recover_job(
        self, job_id: str, container: Container | None, on_log: LogSink | None
    ) -> RunResult:
        saved = self.results_dir / job_id / "result.json"
        if saved.exists():
            return RunResult.model_validate_json(saved.read_text())
        job_file = self.jobs_dir / job_id / "job.json"
        if container is None or not job_file.exists():
            return RunResult(job_id=job_id, status="reaped", error="left by a stopped runner")
        container.reload()
        state = container.attrs["State"]
        if state["Status"] == "created":  # never started: nothing ran, nothing is billed
            return RunResult(job_id=job_id, status="reaped", error="never started")
        cgroup = JobCgroup(self.runner_id, job_id, self.systemd)
        if not cgroup.exists():
            return RunResult(job_id=job_id, status="reaped", error="its metering did not survive")
        job = JobFile.model_validate_json(job_file.read_text())
        started_s = docker_time_ns(state["StartedAt"]) / 1e9
        deadline = time.monotonic() + started_s + job.spec.max_duration_s - time.time()
        return self._supervise(job_id, job, container, cgroup, deadline, on_log, gap=True)


def create_container(
    client: docker.DockerClient,
    options: dict[str, Any],
    pull: bool,
    auth: dict[str, str] | None = None,
) -> Container:
    """Create a container (a job's or a service's); a missing image is pulled (as the registry
    account `auth`, when given) when `pull` allows it and a registry answers, else
    JobStartError says why not."""
    try:
        return client.containers.create(**options)
    except ImageNotFound as exc:
        if not pull:
            raise JobStartError(f"image {options['image']} is not on this machine") from exc
        try:
            images.pull(client, options["image"], auth)
        except (DockerException, images.PullError) as pull_error:
            raise JobStartError(
                f"image {options['image']} is not on this machine and could not be pulled: "
                f"{engine_reason(pull_error)}"
            ) from pull_error
        return client.containers.create(**options)


def _job_of(container: Container) -> str:
    return container.attrs["Labels"][LABEL_JOB]  # sparse listings carry labels here


def _wait(container: Container, seconds: float) -> bool:
    """Wait for the container to exit; kill it when `seconds` run out. True if it was killed."""
    try:
        container.wait(timeout=max(seconds, 0.01))
        return False
    except (requests.exceptions.ConnectionError, requests.exceptions.ReadTimeout):
        pass  # docker-py reports the socket's read timeout as either
    try:
        container.kill()
    except APIError as exc:
        if exc.status_code != 409:  # 409: it exited by itself just now
            raise
        return False
    container.wait()
    return True


def _kill(container: Container) -> None:
    """Kill the container; one that is not running (exited, or only created) is left."""
    with suppress(APIError):  # 409: not running
        container.kill()


def _follow_logs(container: Container, on_log: LogSink) -> threading.Thread:
    def follow() -> None:
        for chunk in container.logs(stream=True, follow=True):
            on_log(chunk.decode(errors="replace"))

    thread = threading.Thread(target=follow, name="logs", daemon=True)
    thread.start()
    return thread


def _remove_cgroup(cgroup: JobCgroup) -> None:
    """Remove the job's cgroup; the engine may take a moment to delete the container's own."""
    for attempt in range(CGROUP_REMOVE_TRIES):
        try:
            cgroup.remove()
            return
        except OSError:
            if attempt == CGROUP_REMOVE_TRIES - 1:
                raise
            time.sleep(0.02)


def engine_reason(error: Exception) -> str:
    """The engine's own words where there are some (APIError carries them in `explanation`)."""
    explanation = getattr(error, "explanation", None)
    return str(explanation or error)
