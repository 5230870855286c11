"""One node of a fleet: the actor that owns the node's docker engine and runs jobs on it with
the hardened runner and its metering, exactly as a single host does.

It imports nothing of Ray: `ray_fleet` makes it an actor pinned to its node. The daemon drives
it by polling (`poll`), which also carries the job's log, its start, the latest copy of its
/out (a checkpoint, taken every few seconds when it changed, so that the job can restart from
it on another node if this one dies) and at the end its results, shipped whole to the daemon:
a node keeps nothing once the daemon has it. Its state directory is its own
(`<state_dir>/nodes/<name>`), so its containers and cgroups carry its name's runner id even
where nodes share an engine.

It runs the fleet's rentals too (`provider.placement.fleet_rentals`): an endpoint's replica or a
pod started by the same Starter a single host uses (`Services`, `Pods`), its port published on
the node's cluster address (`address`) rather than 127.0.0.1, for the gateway on the daemon's
machine to reach; the GPUs a rental holds are counted with the jobs'."""

from __future__ import annotations

import dataclasses
import json
import shutil
import tarfile
import threading
from pathlib import Path

import docker

from offchain.core.errors import UnchainedError
from offchain.protocol.job.jobspec import JobSpec, parse_servicespec
from offchain.protocol.job.offer import OfferedImage
from provider.config import RunnerSettings
from provider.gpu.inventory import HostInventory, host_inventory
from provider.images.pod import POD_SSH_PORT
from provider.rentals.book import ENDPOINT, POD, Rental, Started
from provider.rentals.pods import Pods, pod_resource_name
from provider.rentals.services import Services, host_port, service_container_name
from provider.sandbox.outvolume import OutputTooLarge, OutVolume, is_mounted
from provider.sandbox.runner import Runner, RunResult, Stop

RESULT_FILES = ("out.tar", "log.txt")


@dataclasses.dataclass(frozen=True)
class Finished:
    """A run's result and its files, as they travel from the node to the daemon."""

    result: str  # RunResult as JSON
    files: dict[str, bytes]

    def land(self, results_dir: Path) -> RunResult:
        """Write the files under `results_dir/<job>` and return the result pointing at them."""
        result = RunResult.model_validate_json(self.result)
        folder = results_dir / result.job_id
        folder.mkdir(parents=True, exist_ok=True)
        for name, content in self.files.items():
            (folder / name).write_bytes(content)
        changes: dict[str, object] = {}
        if result.output is not None:
            changes["output"] = dataclasses.replace(result.output, path=folder / "out.tar")
        if result.log_path is not None:
            changes["log_path"] = folder / "log.txt"
        result = result.model_copy(update=changes)
        (folder / "result.json").write_text(result.model_dump_json(indent=1))
        return result


@dataclasses.dataclass(frozen=True)
class Progress:
    """What a poll tells: log text since the last poll, whether the container started, a
    checkpoint newer than the last one shipped, and the end (None while it runs)."""

    log: str
    started: bool
    checkpoint: bytes | None
    finished: Finished | None


@dataclasses.dataclass
class NodeRun:
    """One job on this node, as its threads see it."""

    spec: JobSpec
    log: list[str] = dataclasses.field(default_factory=list)
    started: bool = False
    checkpoint: bytes | None = None
    checkpoint_hash: str = ""
    finished: Finished | None = None
    done: threading.Event = dataclasses.field(default_factory=threading.Event)
    began: threading.Event = dataclasses.field(default_factory=threading.Event)  # or ended


class NodeRunner:
    """The runner of one node, under the node's own name."""

    def __init__(
        self, name: str, settings: RunnerSettings, checkpoint_every_s: int, address: str
    ) -> None:
        node_settings = settings_of(settings, name)
        self.name = name
        self.client = docker.from_env()
        self.address = address
        self.runner = Runner(self.client, node_settings)
        self.services = Services(self.client, node_settings, host=address)
        self.pods = Pods(self.client, node_settings, host=address)
        self.rentals: dict[str, Services | Pods] = {ENDPOINT: self.services, POD: self.pods}
        self.every_s = checkpoint_every_s
        self.runs: dict[str, NodeRun] = {}
        self.lock = threading.Lock()
        self.gpus = [gpu.uuid for gpu in host_inventory(node_settings.state_dir).gpu.gpus]
        self.busy: dict[str, list[str]] = {}  # job -> the GPUs it holds here

    def inventory(self) -> HostInventory:
        return host_inventory(self.runner.settings.state_dir)

    def images(self) -> list[OfferedImage]:
        return self.runner.images()

    def start(
        self,
        job_id: str,
        spec: JobSpec,
        gpus: int,
        escrow: str | None,
        pull_auth: dict[str, str] | None,
        seed: bytes | None,
        limit_s: int,
    ) -> bool:
        """Start the job on a thread of its own (Ray reserved room for it on this node);
        answers once its container started (True) or the run ended before (False), so the
        daemon learns of the start without waiting for a poll."""
        run = self.runs[job_id] = NodeRun(spec)
        try:
            self._hold(job_id, gpus)
        except NotEnoughGpus as exc:  # told at the first poll
            self._end(run, RunResult(job_id=job_id, status="error", error=str(exc)))
            return False
        seed_path = None
        if seed is not None:
            seed_path = self.runner.settings.state_dir / "seeds" / f"{job_id}.tar"
            seed_path.parent.mkdir(parents=True, exist_ok=True)
            seed_path.write_bytes(seed)
        work = threading.Thread(
            target=self._run, args=(job_id, run, escrow, pull_auth, seed_path, limit_s),
            name=f"job-{job_id}", daemon=True,
        )  # fmt: skip
        work.start()
        threading.Thread(target=self._checkpoints, args=(job_id, run), daemon=True).start()
        run.began.wait()
        return run.started

    def _run(
        self,
        job_id: str,
        run: NodeRun,
        escrow: str | None,
        pull_auth: dict[str, str] | None,
        seed: Path | None,
        limit_s: int,
    ) -> None:
        def started() -> None:
            run.started = True
            run.began.set()

        try:
            result = self.runner.run(
                job_id, run.spec, self.busy[job_id], run.log.append, escrow, None, started,
                pull_auth, seed, limit_s,
            )  # fmt: skip
            run.finished = self._ship(result)
        except Exception as exc:  # the daemon learns of it as a run that did not start
            error = f"node {self.name}: {exc!r}"
            self._end(run, RunResult(job_id=job_id, status="error", error=error))
        finally:
            if seed is not None:
                seed.unlink(missing_ok=True)
            with self.lock:
                self.busy.pop(job_id, None)
            run.done.set()
            run.began.set()

    def _hold(self, holder: str, gpus: int) -> list[str]:
        """`gpus` of the node's GPUs no job or rental holds, held by `holder`; NotEnoughGpus
        when Ray's count and the node's disagree (Ray placed it on GPUs the node has not)."""
        with self.lock:
            held = {uuid for taken in self.busy.values() for uuid in taken}
            free = [uuid for uuid in self.gpus if uuid not in held]
            if len(free) < gpus:
                raise NotEnoughGpus(f"node {self.name}: {gpus} GPUs asked, {len(free)} free")
            self.busy[holder] = free[:gpus]
            return self.busy[holder]

    @staticmethod
    def _end(run: NodeRun, failed: RunResult) -> None:
        """The run ends without a metering record (nothing ran: nothing is billed)."""
        run.finished = Finished(failed.model_dump_json(), {})
        run.done.set()
        run.began.set()

    def _ship(self, result: RunResult) -> Finished:
        """The result and its files, read and then deleted here: the daemon keeps them."""
        folder = self.runner.results_dir / result.job_id
        files = {n: (folder / n).read_bytes() for n in RESULT_FILES if (folder / n).exists()}
        shutil.rmtree(folder, ignore_errors=True)
        return Finished(result.model_dump_json(), files)

    def _checkpoints(self, job_id: str, run: NodeRun) -> None:
        """Every `every_s` while the job runs: /out packed, kept when it changed."""
        volume = OutVolume(self.runner.jobs_dir / job_id)
        copy = self.runner.settings.state_dir / "checkpoints" / f"{job_id}.tar"
        copy.parent.mkdir(parents=True, exist_ok=True)
        try:
            while not run.done.wait(self.every_s):
                if not run.started or not is_mounted(volume.mountpoint):
                    continue
                try:
                    packed = volume.pack(copy, run.spec.resources.disk_mib << 20)
                except (OSError, OutputTooLarge, tarfile.TarError):
                    continue  # the job is ending, or /out is over its size: the last copy stays
                if packed.sha256 != run.checkpoint_hash and packed.size_bytes:
                    run.checkpoint, run.checkpoint_hash = copy.read_bytes(), packed.sha256
        finally:
            copy.unlink(missing_ok=True)

    def poll(self, job_id: str) -> Progress:
        """What happened since the last poll; a finished job is forgotten once told."""
        run = self.runs[job_id]
        finished = run.finished  # read first: what the log holds now is all there was
        told = len(run.log)  # the log thread only appends: what is past `told` stays
        text = "".join(run.log[:told])
        del run.log[:told]
        checkpoint, run.checkpoint = run.checkpoint, None
        if finished is not None:
            del self.runs[job_id]
        return Progress(text, run.started, checkpoint, finished)

    def stop(self, job_id: str, why: Stop) -> None:
        self.runner.stop(job_id, why)

    def recover(self) -> list[Finished]:
        """Jobs of this node's previous actor: finished (results shipped) or reaped."""
        return [self._ship(result) for result in self.runner.recover()]

    # -- rentals -------------------------------------------------------------------------

    def start_rental(self, deployment: Rental, gpus: int) -> Started:
        """Start `deployment` (one replica of an endpoint, or a pod) with its kind's Starter,
        holding `gpus` of this node's GPUs; answers once it is healthy, with where it answers
        on this node's address. An UnchainedError saying why not, nothing of it left."""
        uuids = self._hold(rental_holder(deployment.name), gpus)
        try:
            return self.rentals[deployment.kind].start_deployment(deployment, uuids)
        except BaseException:
            self._release(deployment.name)
            raise

    def stop_rental(self, kind: str, names: list[str]) -> None:
        """Remove what runs the rentals `names` here (a pod keeps its workspace on this node's
        engine); a name that does not run here is passed over."""
        for name in names:
            self.rentals[kind].stop(name)
            self._release(name)

    def rental_names(self, kind: str) -> list[str]:
        """The rentals of `kind` that have containers on this node."""
        return self.rentals[kind].leftovers()["containers"]

    def rental_upstream(self, deployment: Rental) -> str:
        """Where `deployment`, as this node runs it, answers once healthy ("" when it has no
        container here), its GPUs held again: a restarted daemon finds what its predecessor
        placed. An UnchainedError when its container is here but does not run."""
        name = deployment.name
        if name not in self.rental_names(deployment.kind):
            return ""
        if deployment.kind == POD:
            container = self.client.containers.get(pod_resource_name(self.pods.runner_id, name))
            upstream = f"http://{self.address}:{host_port(container, POD_SSH_PORT, self.address)}"
        else:
            spec = parse_servicespec(json.loads(deployment.spec_json))
            upstream = self.services.scale(name, spec, 1)
            runner = self.services.runner_id
            container = self.client.containers.get(service_container_name(runner, name, 0))
        requests = container.attrs["HostConfig"].get("DeviceRequests") or []
        with self.lock:
            self.busy[rental_holder(name)] = [u for r in requests for u in r["DeviceIDs"] or []]
        return upstream

    def rental_logs(self, kind: str, name: str, lines: int) -> str:
        return self.rentals[kind].logs(name, lines)

    def forget_pod(self, deployment: Rental, now_ms: int) -> bool:
        """`Pods.forget` on this node: its /workspace removed once its keep time passed."""
        return self.pods.forget(deployment, now_ms)

    def _release(self, name: str) -> None:
        with self.lock:
            self.busy.pop(rental_holder(name), None)


class NotEnoughGpus(UnchainedError):
    """Ray placed work on GPUs this node has not (what it advertises and what it has differ)."""


def settings_of(settings: RunnerSettings, node: str) -> RunnerSettings:
    """The runner's settings of node `node`: its own state directory under the daemon's."""
    return settings.model_copy(update={"state_dir": settings.state_dir / "nodes" / node})


def rental_holder(name: str) -> str:
    """The key a rental holds its GPUs under beside the jobs' (a job id takes no ':')."""
    return f"rental:{name}"
