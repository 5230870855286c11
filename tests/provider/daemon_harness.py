"""The provider daemon's world for tests: the session devnet, a deployment, the real market
(uvicorn in this process), consumers who sign their requests and lock escrows with the
protocol's builder, and `unchained provider run` as a subprocess (so it can be SIGKILLed and
SIGTERMed) on the real docker engine. Nothing of it outlives a test."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import docker
import httpx
import uvicorn

from consumer.sdk.client import MarketClient
from consumer.sdk.keys import ConsumerKey
from consumer.sdk.session import Consumer
from consumer.sdk.store import JobStore
from devnet.process import DevnetProcess, free_port
from offchain.chain.utxo import format_out_ref
from offchain.core.serving import KEEP_ALIVE_S
from offchain.market.app import create_app
from offchain.market.settings import MarketSettings
from offchain.protocol.api.wire import EscrowParameters
from offchain.protocol.job.jobspec import JobSpec
from offchain.protocol.ledger.split import settle_split
from offchain.protocol.tx import escrow as escrows
from offchain.protocol.tx.deployment import Deployment
from offchain.protocol.tx.txbuild import Wallet
from provider.config import RunnerSettings
from provider.sandbox.hardening import LABEL_JOB, LABEL_RUNNER
from provider.sandbox.runner import Runner
from tests.chains import confirmations
from tests.market.client import Party, serve
from tests.market.flow import FAST
from tests.protocol.onchain import confirm, wallet
from tests.provider.chain import deployed

IDENTITY = "unchained-market:daemon-test"
CORE_PRICE = 1_000_000  # lovelace per core-second: a payout of 2+ s is above the min-UTxO
MINUTE_MS = 60_000


def spec(image: str, script: str, seconds: int = 60, **resources: int) -> dict[str, Any]:
    """A job for one of the daemon's CPU slots: busybox `sh -c script`."""
    wanted = {"cpu_cores": 1, "memory_mib": 128, "disk_mib": 8, **resources}
    return {
        "image": image, "command": ["sh", "-c", script], "resources": wanted,
        "max_duration_s": seconds, "max_price_lovelace": CORE_PRICE * seconds,
    }  # fmt: skip


def market_settings(
    tmp_path: Path, devnet: DevnetProcess, deployment_file: Path, market_key: Path | None,
    **changes: Any,
) -> MarketSettings:  # fmt: skip
    """The market on `devnet`; with `market_key` it settles receipts from that wallet."""
    return MarketSettings(
        data_dir=tmp_path / "market", ogmios_url=devnet.url, deployment=deployment_file,
        identity=IDENTITY, confirmations=confirmations(devnet), wallet_key=market_key, **FAST,
        **changes,
    )  # fmt: skip


async def quiet_market(
    devnet: DevnetProcess, tmp_path: Path, **changes: Any
) -> tuple[Path, Deployment, MarketSettings]:
    """A fresh deployment (its file and itself) and the settings of a market on `devnet` with
    no wallet: it settles nothing (a provider's payout watcher may, or a refund)."""
    deployment_file = tmp_path / "deployment.json"
    deployment = await deployed(devnet, deployment_file)
    settings = market_settings(tmp_path, devnet, deployment_file, None, **changes)
    return deployment_file, deployment, settings


@contextlib.asynccontextmanager
async def daemon_on_market(
    devnet: DevnetProcess, tmp_path: Path, deployment_file: Path, settings: MarketSettings,
    *, leaves_nothing: bool = True, **provider: Any,
) -> AsyncIterator[tuple[ProviderProcess, Wallet, str]]:  # fmt: skip
    """The market served with `settings` and a new provider's daemon on it (`provider`: its
    slots and settings), started: its offer published. Stopped at the end; `leaves_nothing`:
    no container, workspace or cgroup of any job may be left."""
    with serve(settings) as url:
        daemon, wallet_ = await new_provider(devnet, tmp_path, deployment_file, url, **provider)
        try:
            await daemon.start().logged("offer published")
            yield daemon, wallet_, url
        finally:
            daemon.stop()
            left = daemon.reap()
            if leaves_nothing:
                assert left == {"containers": [], "workspaces": [], "cgroups": []}


@contextlib.asynccontextmanager
async def consumer_of(devnet: DevnetProcess, url: str) -> AsyncIterator[Party]:
    """A consumer with a funded wallet of its own, talking to the market at `url`."""
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        yield Party.new(http, IDENTITY, await wallet(devnet))


async def settling_market(
    devnet: DevnetProcess, tmp_path: Path
) -> tuple[Path, Deployment, MarketSettings]:
    """A fresh deployment (its file and itself) and the settings of a market on `devnet` that
    settles receipts from a funded wallet of its own."""
    deployment_file, deployment, _ = await quiet_market(devnet, tmp_path)
    market_key = tmp_path / "market.skey"
    (await wallet(devnet)).key.save(str(market_key))
    settings = market_settings(tmp_path, devnet, deployment_file, market_key)
    return deployment_file, deployment, settings


def provider_toml(
    state_dir: Path, market_url: str, bundles: int, disk_mib: int = 32, offer_lines: str = "",
    **daemon: int | str,
) -> str:  # fmt: skip
    """`bundles` CPU bundles of one core, 512 MiB and `disk_mib` each; `offer_lines` more of
    the offer (TOML); a `daemon` setting's text is quoted."""
    settings = {"heartbeat_ms": 1000, "poll_s": 1, "payout_every_ms": 500, "grace_ms": 60_000,
                **daemon}  # fmt: skip
    lines = "\n".join(f"{name} = {json.dumps(value)}" for name, value in settings.items())
    return f"""
[offer]
gpus = []
cpu_cores = {bundles}
memory_mib = {512 * bundles}
disk_mib = {disk_mib * bundles}
cpu_bundles = {bundles}
{offer_lines}

[offer.prices]
gpu = 0
cpu_core = {CORE_PRICE}
memory_gib = 0
disk_gib = 0

[runner]
state_dir = "{state_dir}"

[daemon]
market_url = "{market_url}"
market_identity = "{IDENTITY}"
{lines}
"""


@dataclasses.dataclass
class ProviderProcess:
    """`unchained provider run` in a subprocess, its log in a file."""

    config: Path
    state_dir: Path
    devnet_url: str
    deployment_file: Path
    log_path: Path
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> ProviderProcess:
        command = [
            sys.executable, "-m", "unchained.cli", "provider", "run", "--config", str(self.config),
            "--ogmios-url", self.devnet_url, "--deployment", str(self.deployment_file),
        ]  # fmt: skip
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child holds it
        self.process = subprocess.Popen(command, stdout=log, stderr=log, cwd=os.getcwd())
        log.close()
        return self

    def signal(self, signum: int) -> None:
        assert self.process is not None
        self.process.send_signal(signum)

    def wait(self, timeout_s: float) -> int:
        assert self.process is not None
        return self.process.wait(timeout=timeout_s)

    def stop(self) -> None:
        """SIGKILL if still running (a test's end): no grace."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    async def logged(self, text: str, timeout_s: float = 60, times: int = 1) -> None:
        """Wait until the daemon's log holds `text` (e.g. its offer is published) `times`."""
        loop = asyncio.get_running_loop()
        until = loop.time() + timeout_s
        while self.log().count(text) < times:
            assert self.process is not None and self.process.poll() is None, self.log()
            assert loop.time() < until, f"no {text!r} in the daemon's log:\n{self.log()}"
            await asyncio.sleep(0.1)

    def reap(self) -> dict[str, list[str]]:
        """Remove what jobs left (containers, workspaces, cgroups); returns what there was.
        A job still running is killed first: recovery would otherwise supervise it to its
        deadline (a test's end needs no result)."""
        client = docker.from_env()
        runner = Runner(client, RunnerSettings(state_dir=self.state_dir))
        left = runner.leftovers()
        mine = f"{LABEL_RUNNER}={runner.runner_id}"
        for container in client.containers.list(filters={"label": [mine]}):
            with contextlib.suppress(docker.errors.APIError):  # it may exit meanwhile
                container.kill()
        runner.recover()  # collects or reaps whatever a killed daemon left
        return left


async def new_provider(
    devnet: DevnetProcess, tmp_path: Path, deployment_file: Path, market_url: str,
    bundles: int = 2, disk_mib: int = 32, offer_lines: str = "", **daemon: int | str,
) -> tuple[ProviderProcess, Wallet]:  # fmt: skip
    """A funded provider key in a fresh state directory and its daemon (not started)."""
    provider = await wallet(devnet)
    state_dir = tmp_path / "provider"
    state_dir.mkdir()
    provider.key.save(str(state_dir / "provider.skey"))
    config = tmp_path / "provider.toml"
    config.write_text(provider_toml(state_dir, market_url, bundles, disk_mib, offer_lines,
                                    **daemon))  # fmt: skip
    log = tmp_path / "daemon.log"
    return ProviderProcess(config, state_dir, devnet.url, deployment_file, log), provider


@dataclasses.dataclass
class MarketServer:
    """The market (uvicorn in this process) on one port, stopped and started again on the
    same port and database: a market outage as the daemon sees it."""

    settings: MarketSettings
    port: int = dataclasses.field(default_factory=free_port)
    server: uvicorn.Server | None = None
    thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> MarketServer:
        app = create_app(self.settings)
        config = uvicorn.Config(
            app,
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            timeout_keep_alive=KEEP_ALIVE_S,
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            assert self.thread.is_alive() and time.monotonic() < deadline, "no market"
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        if self.server is not None and self.thread is not None:
            self.server.should_exit = True
            self.thread.join(timeout=30)
            self.server = self.thread = None


@dataclasses.dataclass
class LockedJob:
    job: str
    consumer: Party
    params: dict[str, Any]
    escrow: str


async def request_and_lock(
    devnet: DevnetProcess, deployment: Deployment, consumer: Party, job_spec: dict[str, Any]
) -> LockedJob:
    """The consumer's side: a signed request, the quoted escrow locked on chain with the
    protocol's builder, and the escrow reported to the market."""
    quoted = await consumer.send("POST", "/jobs", {
        "spec": job_spec, "consumer_address": str(consumer.wallet.address)})  # fmt: skip
    assert quoted.status_code == 201, quoted.text
    return await fund_quoted(devnet, deployment, consumer, quoted.json()["job_id"])


async def fund_quoted(
    devnet: DevnetProcess, deployment: Deployment, consumer: Party, job: str
) -> LockedJob:
    """A quoted job's escrow locked on chain and reported to the market."""
    params = (await consumer.send("GET", f"/jobs/{job}/escrow")).json()
    datum = EscrowParameters.model_validate(params).to_datum()
    unsigned = escrows.lock(
        devnet.context(), deployment, consumer.wallet.address, datum, params["lovelace"]
    )
    lock = await confirm(devnet, consumer.wallet.sign(unsigned))
    ref = format_out_ref(escrows.lock_escrow(lock.id))
    funded = await consumer.send("POST", f"/jobs/{job}/escrow", {"escrow": ref})
    assert funded.status_code == 200, funded.text
    return LockedJob(job, consumer, params, ref)


async def wait_state(party: Party, job: str, states: set[str], timeout_s: float = 90) -> dict:
    """The job's status once it is in one of `states` (polled)."""
    loop = asyncio.get_running_loop()
    until = loop.time() + timeout_s
    while True:
        answer = await party.send("GET", f"/jobs/{job}")
        status = answer.json()
        if status.get("state") in states:
            return status
        assert loop.time() < until, f"job {job}: {status}"
        await asyncio.sleep(0.3)


async def wait_container_running(job: str, timeout_s: float = 30) -> None:
    """Until the job's container runs: the market hears "running" just before the runner
    creates and starts it, so a kill at that word may find it only created."""
    client = docker.from_env()
    loop = asyncio.get_running_loop()
    until = loop.time() + timeout_s
    wanted = {"label": f"{LABEL_JOB}={job}", "status": "running"}
    while not client.containers.list(filters=wanted, sparse=True):
        assert loop.time() < until, f"job {job}: no running container"
        await asyncio.sleep(0.05)


def provider_share(job: LockedJob, units: int) -> int:
    """What a settlement of `units` pays the provider of `job` (market-submitted)."""
    params = job.params
    return settle_split(
        params["lovelace"], params["price_per_unit"], units, params["max_units"],
        params["fee_allowance"],
    ).provider  # fmt: skip


@contextlib.contextmanager
def fake_market_server() -> Iterator[tuple[str, list[dict[str, Any]], list[str]]]:
    """A market that misbehaves on purpose (tests/provider/test_daemon_market.py says why):
    (url, assignments to hand out once, requests seen as 'METHOD path')."""
    pending: list[dict[str, Any]] = []
    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def answer(self, value: Any) -> None:
            body = json.dumps(value).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            with contextlib.suppress(OSError):  # a long-poll the daemon gave up on at its stop
                self.wfile.write(body)

        def do_GET(self) -> None:
            seen.append(f"GET {self.path}")
            if self.path.startswith("/providers/assignments"):
                handed, pending[:] = list(pending), []
                if not handed:
                    threading.Event().wait(0.5)  # a short long-poll
                self.answer(handed)
            else:
                self.answer({})

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            seen.append(f"POST {self.path}")
            self.answer({})

        def log_message(self, *_: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", pending, seen
    server.shutdown()
    server.server_close()


async def refusal(
    daemon: ProviderProcess, pending: list[dict[str, Any]], job_id: str, job: dict, escrow: str,
    terms: dict[str, Any],
) -> str:  # fmt: skip
    """Start `daemon`, assign it `job` on `escrow` (locked with `terms`) as `job_id` through
    the fake market's `pending`, and wait for its refusal and the zero receipt handed to the
    market; stopped, it must leave nothing behind. The refusal's line of its log."""
    try:
        await daemon.start().logged("offer published")
        pending.append(assignment(job_id, job, escrow, terms))
        await daemon.logged(f"job {job_id} refused", timeout_s=30)
        await daemon.logged(f"job {job_id}: its zero receipt is with the market", timeout_s=30)
    finally:
        daemon.stop()
        assert daemon.reap() == {"containers": [], "workspaces": [], "cgroups": []}
    return next(line for line in daemon.log().splitlines() if f"job {job_id} refused" in line)


def assignment(
    job_id: str, job: dict[str, Any], escrow: str, terms: dict[str, Any]
) -> dict[str, Any]:
    """An assignment as a market hands it out (`offchain.protocol.api.wire.Assignment`): the job,
    its escrow and the market's word on its terms, which the daemon reads on chain instead."""
    return {
        "job_id": job_id, "spec": job, "escrow": escrow, "price_per_unit": terms["price_per_unit"],
        "max_units": terms["max_units"], "deadline_ms": terms["deadline"],
    }  # fmt: skip


def safe_terms(
    consumer: Wallet, provider: Wallet, job: dict[str, Any], now_ms: int
) -> dict[str, Any]:
    """An escrow's terms as an honest market quotes `job` to `provider`: closing in an hour."""
    return {
        "consumer": consumer.address, "provider": provider.address,
        "provider_vkey": provider.vkey, "price_per_unit": CORE_PRICE, "max_units": 60,
        "deadline": now_ms + 30 * MINUTE_MS, "settle_window": 30 * MINUTE_MS,
        "job_id": JobSpec.model_validate(job).job_id(), "fee_allowance": 2_000_000,
    }  # fmt: skip


async def lock_escrow(
    devnet: DevnetProcess, deployment: Deployment, consumer: Wallet, terms: dict[str, Any]
) -> str:
    """Lock an escrow with `terms` on the devnet; its TXID#IX."""
    datum = escrows.new_escrow(**terms)
    lovelace = escrows.lock_lovelace(devnet.context(), deployment, datum)
    unsigned = escrows.lock(devnet.context(), deployment, consumer.address, datum, lovelace)
    tx = await confirm(devnet, consumer.sign(unsigned))
    return format_out_ref(escrows.lock_escrow(tx.id))


@contextlib.asynccontextmanager
async def renter(
    devnet: DevnetProcess, deployment: Deployment, url: str, state: Path
) -> AsyncIterator[Consumer]:
    """An SDK consumer with a funded key of its own on the market at `url`."""
    funded = await wallet(devnet)
    key = ConsumerKey(funded.key)
    made = Consumer(
        key, MarketClient.open(url, IDENTITY, key), devnet.context(), devnet.url, deployment,
        JobStore(state),
    )  # fmt: skip
    try:
        yield made
    finally:
        await made.market.aclose()


async def provider_in(
    devnet: DevnetProcess, tmp_path: Path, name: str, deployment_file: Path, url: str
) -> ProviderProcess:
    """A provider daemon of its own directory, started and offering."""
    home = tmp_path / name
    home.mkdir()
    daemon, _ = await new_provider(devnet, home, deployment_file, url)
    await daemon.start().logged("offer published")
    return daemon
