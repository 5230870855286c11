"""Batch jobs paid over a channel: the `job` kind's Starter (`ChannelJobs`), the receipt the
daemon signs when one ends (`JobReceipts`) and what the gateway serves of it (`JobFiles`).

A channel job is an escrowed job's JobSpec run the same way (`provider.sandbox.runner.Runner`:
the hardened container, metering from its cgroup, the /out archive and log kept under
`<state_dir>/results/<job id>`, `job_id`), paid per second by its renter's IOUs as a pod is, with no
escrow, lock or settle. It runs in a thread of its own: `start_deployment` answers once the
container started (per-second billing counts from then), and the daemon asks `finished` each
round; once the run ended (it exited, hit its max duration, or was stopped) the daemon signs the
escrowed job's own Receipt for it (`offchain.protocol.job.channel_job.receipt_ref`: an out-ref
no escrow can have) and freezes its billing at the receipt's whole seconds.
"""

from __future__ import annotations

import json
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, Any

import docker
from docker.errors import DockerException, NotFound
from pycardano import PaymentSigningKey, ScriptHash

from offchain.chain.utxo import format_out_ref
from offchain.protocol.job.channel_job import ChannelJobSpec, parse_channel_job, receipt_ref
from offchain.protocol.job.jobspec import JobSpecError
from offchain.protocol.job.receipt import Receipt
from provider.config import RunnerSettings
from provider.money.receipts import receipt_fields
from provider.rentals.book import Rental, Started
from provider.sandbox.hardening import LABEL_JOB, LABEL_RUNNER
from provider.sandbox.runner import JobStartError, Runner, RunResult, runner_id

if TYPE_CHECKING:  # the placements import the Starters: no cycle at run time
    from provider.placement.interface import Placement

RECEIPT_FILE = "receipt.json"
ARCHIVE_FILE = "out.tar"
RESULT_FILE = "result.json"
STOP_WAIT_S = 120.0  # a stopped job's results are packed before its slot is free
LOST = "the provider restarted while it ran and its run could not be recovered"


def job_id(name: str) -> str:
    """The runner's job id of the deployment the book names `name` (`<renter tag>.<name>`): its
    cgroup, container label and results folder take no '.'."""
    return name.replace(".", "_")


def spec_of(deployment: Rental) -> ChannelJobSpec:
    """The channel job `deployment` runs; JobStartError if its spec cannot be read."""
    try:
        return parse_channel_job(json.loads(deployment.spec_json))
    except (ValueError, JobSpecError) as exc:
        raise JobStartError(f"job {deployment.name}: its spec: {exc}") from exc


def ended_reason(result: RunResult, max_duration_s: int) -> str:
    """Why a job's deployment ended, as its book row and its renter read it."""
    if result.status == "timeout":
        return f"job timeout: killed at its max duration ({max_duration_s} s)"
    if result.status == "cancelled":
        return f"job cancelled: stopped (exit code {result.exit_code})"
    if result.record is None:
        return f"job {result.status}: {result.error}"
    return f"job {result.status}: exit code {result.exit_code}"


class ChannelJobs:
    """The channel jobs this provider (its state directory) runs: the `job` kind's Starter."""

    def __init__(
        self,
        client: docker.DockerClient,
        settings: RunnerSettings,
        placement: Placement | None = None,
    ) -> None:
        """`placement`: where its jobs run (None: this machine's runner; a fleet's places each
        on a node, `provider.placement.ray_fleet`, its results landing here all the same)."""
        self.client = client
        self.settings = settings
        self.results_dir = settings.state_dir / "results"
        self._runner = placement  # else made on the first start: the gateway reads logs
        self._runs: dict[str, Future[RunResult]] = {}

    @property
    def runner(self) -> Placement:
        if self._runner is None:
            self._runner = Runner(self.client, self.settings)
        return self._runner

    def start_deployment(self, deployment: Rental, gpu_uuids: list[str]) -> Started:
        """Run the job in a thread of its own; answers once its container started (or the
        run ended first: a job of a few milliseconds). JobStartError if it never started."""
        spec = spec_of(deployment)
        name, job = deployment.name, job_id(deployment.name)
        started = threading.Event()
        run: Future[RunResult] = Future()

        def work() -> None:
            try:
                run.set_result(self.runner.run(job, spec.job, gpu_uuids, on_start=started.set))
            except BaseException as exc:  # the run's own crash: the daemon reads it in `finished`
                run.set_exception(exc)
            finally:
                started.set()

        threading.Thread(target=work, name=f"job-{name}", daemon=True).start()
        started.wait()
        if run.done():
            result = run.result()  # a crash before it ran raises here: the deployment fails
            if result.record is None:
                raise JobStartError(f"job {name} did not start: {result.error}")
        self._runs[name] = run
        try:
            image = str(self.client.images.get(spec.job.image).id)
        except DockerException:
            image = ""
        return Started("", image)

    def finished(self, deployment: Rental) -> RunResult | None:
        """The run's result once it ended (None while it runs). After a restart the runner's
        recovery finishes a surviving container and saves its result; one it could not
        recover ends as `reaped`, billed nothing more."""
        name = deployment.name
        run = self._runs.get(name)
        if run is not None:
            if not run.done():
                return None
            try:
                return run.result()
            except Exception as exc:  # the run crashed: it ends with the reason
                return RunResult(job_id=job_id(name), status="error",
                                 error=f"{type(exc).__name__}: {exc}")  # fmt: skip
        saved = self.results_dir / job_id(name) / RESULT_FILE
        if saved.exists():
            return RunResult.model_validate_json(saved.read_text())
        if self._containers(name):  # the runner's recovery supervises it
            return None
        return RunResult(job_id=job_id(name), status="reaped", error=LOST)

    def stop(self, name: str) -> None:
        """Kill the job's container (a run ends metered, "cancelled") and wait for its results
        to be saved; a repeated stop, or one of a job that ended, does nothing."""
        run = self._runs.get(name)
        if run is None or run.done():
            return
        self.runner.stop(job_id(name))
        try:
            run.result(timeout=STOP_WAIT_S)
        except Exception:  # `finished` reads what happened (a timeout too)
            return

    def logs(self, name: str, lines: int) -> str:
        """The last `lines` lines of the job's output: its saved log once it ended."""
        saved = self.results_dir / job_id(name) / "log.txt"
        if saved.exists():
            return "\n".join(saved.read_text(errors="replace").splitlines()[-lines:])
        for container in self._containers(name):
            try:
                return str(container.logs(tail=lines).decode(errors="replace"))
            except NotFound:
                return ""
        return ""

    def _containers(self, name: str) -> list[Any]:
        runner = runner_id(self.settings.state_dir)
        labels = [f"{LABEL_RUNNER}={runner}", f"{LABEL_JOB}={job_id(name)}"]
        return list(self.client.containers.list(all=True, filters={"label": labels}))


class JobReceipts:
    """Signs a channel job's receipt with the provider key when its run ended, and keeps it
    beside its results (`<results>/<name>/receipt.json`, written once)."""

    def __init__(
        self, key: PaymentSigningKey, network_id: int, settle_hash: ScriptHash, results_dir: Path
    ) -> None:
        self.key, self.network_id, self.settle_hash = key, network_id, settle_hash
        self.results_dir = results_dir

    def keep(self, deployment: Rental, result: RunResult) -> dict[str, Any] | None:
        """The receipt's record for `deployment`'s run (None: it never ran, nothing is billed
        and nothing signed); an existing one is kept as it is."""
        path = self.results_dir / job_id(deployment.name) / RECEIPT_FILE
        if path.exists():
            return dict(json.loads(path.read_text()))
        if result.record is None:
            return None
        fields = receipt_fields(result)
        ref = receipt_ref(deployment.channel, deployment.public_name)  # as its renter names it
        receipt = Receipt.sign(self.key, self.network_id, self.settle_hash, ref, fields.units,
                               fields.result_hash, fields.evidence_hash)  # fmt: skip
        record = {
            "escrow": format_out_ref(ref), "network_id": self.network_id,
            "settle_hash": self.settle_hash.payload.hex(), **receipt.body(),
            "status": result.status, "exit_code": result.exit_code,
            "price_per_second": deployment.price_per_second,
        }  # fmt: skip
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{RECEIPT_FILE}.part")
        partial.write_text(json.dumps(record, indent=1))
        partial.replace(path)
        return record


class JobFiles:
    """What the gateway serves of a channel job that ended: its receipt and result archive."""

    def __init__(self, results_dir: Path) -> None:
        self.results_dir = results_dir

    @classmethod
    def of(cls, settings: RunnerSettings) -> JobFiles:
        return cls(settings.state_dir / "results")

    def receipt(self, name: str) -> dict[str, Any] | None:
        """The receipt of the job the book names `name`, once signed."""
        path = self.results_dir / job_id(name) / RECEIPT_FILE
        return dict(json.loads(path.read_text())) if path.exists() else None

    def archive(self, name: str) -> Path | None:
        """The result archive the receipt hashed (None: the run left none: its hash is of
        no bytes)."""
        path = self.results_dir / job_id(name) / ARCHIVE_FILE
        return path if path.exists() else None
