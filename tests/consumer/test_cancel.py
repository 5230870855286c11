"""`unchained job cancel` on the devnet with the real market and the real provider daemon (one
slot, `unchained provider run` in its own process, jobs in the docker engine). A job the
daemon has not taken (it is away: SIGKILLed, its offer still listed) is cancelled by both
signatures in the next block once the daemon is back and answers the standing request; a
running job is stopped (its container gone within seconds) and settled for the units it used.
Balances to the lovelace. The renter's bad requests are refused and change nothing (the
daemon's own check is tests/protocol/test_cancel_check.py)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import docker
import httpx
import pytest

from offchain.chain.follower import tip_point
from offchain.chain.utxo import parse_out_ref, utxo_at
from offchain.protocol.ledger.split import settle_split
from offchain.protocol.tx import escrow as escrows
from offchain.protocol.tx.deployment import Deployment
from offchain.protocol.tx.txbuild import Wallet
from provider.daemon.journal import Journal
from provider.images import recipes as images
from provider.sandbox.hardening import LABEL_JOB
from tests.chains import blocks_during
from tests.consumer.cli import UNCHAINED, cli_env, funded_key, run_json, tx_fee
from tests.consumer.conftest import Market
from tests.consumer.test_daemon import submit
from tests.market.client import Party, serve
from tests.protocol.onchain import balance
from tests.protocol.test_cancel_check import adding, without
from tests.provider.daemon_harness import (
    IDENTITY,
    ProviderProcess,
    new_provider,
    settling_market,
    spec,
    wait_state,
)

TICKS = "i=0; while true; do echo tick $i; i=$((i+1)); sleep 1; done"


@dataclasses.dataclass
class World:
    deployment: Deployment
    market: Market
    daemon: ProviderProcess
    provider: Wallet
    renter: Wallet
    env: dict[str, str]
    here: Path


@pytest.fixture(scope="module")
async def world(devnet, tmp_path_factory) -> AsyncIterator[World]:
    """A settling market, a one-slot daemon (started) and a renter with exact funds."""
    images.busybox_image(docker.from_env())
    tmp = tmp_path_factory.mktemp("cancel")
    deployment_file, deployment, settings = await settling_market(devnet, tmp)
    with serve(settings) as url:
        daemon, provider = await new_provider(devnet, tmp, deployment_file, url, bundles=1)
        here = tmp / "consumer"  # not tmp: the daemon's `provider` folder would shadow the package
        here.mkdir()
        renter, key = await funded_key(devnet, here, 400_000_000)
        market = Market(settings, url, deployment_file)
        env = cli_env(market, devnet, key, here / "state", IDENTITY)
        try:
            await daemon.start().logged("offer published")
            yield World(deployment, market, daemon, provider, renter, env, here)
        finally:
            daemon.stop()
            daemon.reap()


POLLS_MS = 2_000  # the daemon's long-poll round trip and the CLI's 0.5 s polls for the Cancel


async def test_a_job_not_taken_is_cancelled_in_the_next_block(devnet, world):
    w = world
    w.daemon.signal(signal.SIGKILL)  # the provider is away: the funded job waits for it
    w.daemon.wait(10)
    start, provider_start = balance(devnet, w.renter.address), balance(devnet, w.provider.address)
    since = await tip_point(devnet.url)
    busybox = images.busybox_image(docker.from_env())
    job = submit(w.env, w.here, "waiting", spec(busybox, "echo never"))
    job_id = job["job_id"]
    async with httpx.AsyncClient(base_url=w.market.url, timeout=60) as http:
        renter = Party.new(http, IDENTITY, w.renter)
        await refused_requests(devnet, w, renter, job_id)

        code, silent = run_json(w.env, "job", "cancel", job_id[:8], "--wait", "2", cwd=w.here)
        assert code == 1 and silent["error"] == "ProviderSilent", silent
        assert f"`unchained job cancel {job_id}` again later" in silent["message"]
        assert f"`unchained job refund {job_id}` once the escrow closes" in silent["message"]
        assert (await renter.send("GET", f"/jobs/{job_id}/cancel")).json()["state"] == "requested"

        w.daemon.start()  # back: it answers the standing request, never takes the job
        await w.daemon.logged(f"job {job_id}: cancel of escrow {job['escrow']} signed")
        # asked again now the provider is up (the chain makes an empty block every 2 s of
        # waiting, so the count below holds only for a provider that answers at once)
        code, done = run_json(w.env, "job", "cancel", job_id, cwd=w.here)
        assert code == 0, done
        assert (done["how"], done["state"]) == ("cancelled", "cancelled")
        # the block after the request (or the next), and on a realistic test chain those its
        # scaled time makes during the daemon's and the CLI's round trips (about 2 s of wall time)
        assert 1 <= done["blocks"] <= 2 + blocks_during(devnet, POLLS_MS)
        assert (await wait_state(renter, job_id, {"cancelled"}))["state"] == "cancelled"
        page = (await http.get(f"/api/explorer/jobs/{job_id}")).json()
        explorer = (await http.get(f"/explorer/jobs/{job_id}")).text

    lock_fee, cancel_fee = [
        await tx_fee(devnet, tx, since) for tx in (job["lock_tx"], done["tx_id"])
    ]
    assert done["fee"] == cancel_fee and done["returned"] == job["lock_lovelace"] - cancel_fee
    assert balance(devnet, w.renter.address) == start - lock_fee - cancel_fee
    assert balance(devnet, w.provider.address) == provider_start
    entry = Journal(w.daemon.state_dir).get(job_id)
    assert entry is not None and entry.stage == "cancelled" and done["tx_id"] in entry.reason
    assert f"job {job_id}: cancel of escrow {job['escrow']} signed" in w.daemon.log()
    assert f"job {job_id} assigned" not in w.daemon.log()
    assert page["job"]["cancel"] == {"words": "on chain", "refusal": None, "tx": done["tx_id"]}
    details = [e["detail"] for e in page["events"]]
    assert any(d.startswith("cancel requested by the renter") for d in details), details
    assert "cancel signed by the provider: the renter submits it" in details
    assert "Cancel</dt>" in explorer and done["tx_id"] in explorer


async def refused_requests(devnet, w: World, renter: Party, job_id: str) -> None:
    """Someone else's cancel (403), a transaction that is not a Cancel of this escrow alone
    (422 naming it, nothing stored), and a replayed request (409) change nothing."""
    path = f"/jobs/{job_id}/cancel"
    escrow = utxo_at(
        devnet.context(),
        parse_out_ref((await renter.send("GET", f"/jobs/{job_id}")).json()["escrow"]),
    )
    honest = escrows.cancel(devnet.context(), w.deployment, escrow, w.renter.address)
    stranger = Party.new(renter.http, IDENTITY)
    answer = await stranger.send("POST", path, {"transaction": honest.to_cbor_hex()})
    assert answer.status_code == 403 and "another consumer" in answer.text, answer.text

    provider_coin = devnet.context().utxos(w.provider.address)[0].input
    for change, reason in [
        (adding("inputs", provider_coin), "the provider's own"),
        (without(escrow.input), "does not spend escrow"),
    ]:
        tx = escrows.cancel(devnet.context(), w.deployment, escrow, w.renter.address)
        change(tx)
        answer = await renter.send("POST", path, {"transaction": tx.to_cbor_hex()})
        assert answer.status_code == 422 and reason in answer.text, answer.text
        assert '"transaction"' in answer.text
    assert (await renter.send("GET", path)).json()["state"] is None  # nothing was stored

    body = json.dumps({"transaction": honest.to_cbor_hex()}).encode()
    headers = renter.headers("POST", path, body) | {"content-type": "application/json"}
    first = await renter.http.post(path, content=body, headers=headers)
    assert first.status_code == 200 and first.json()["state"] == "requested", first.text
    events = len((await renter.http.get(f"/api/explorer/jobs/{job_id}")).json()["events"])
    replayed = await renter.http.post(path, content=body, headers=headers)
    assert replayed.status_code == 409 and "nonce" in replayed.text, replayed.text
    assert len((await renter.http.get(f"/api/explorer/jobs/{job_id}")).json()["events"]) == events


async def test_a_running_job_is_stopped_and_settled_for_the_units_it_used(devnet, world):
    w = world
    await w.daemon.logged("offer published", times=2)  # back since the first test
    start, provider_start = balance(devnet, w.renter.address), balance(devnet, w.provider.address)
    since = await tip_point(devnet.url)
    busybox = images.busybox_image(docker.from_env())
    job = submit(w.env, w.here, "ticks", spec(busybox, TICKS))
    job_id = job["job_id"]
    async with httpx.AsyncClient(base_url=w.market.url, timeout=60) as http:
        renter = Party.new(http, IDENTITY, w.renter)
        await wait_log(renter, job_id, "tick 2")  # 3 s at least: a payout above the min-UTxO
        loop = asyncio.get_running_loop()
        asked = loop.time()
        cancelling = await asyncio.create_subprocess_exec(
            *UNCHAINED, "job", "cancel", job_id, "--json", env=w.env, cwd=w.here,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        await container_gone(job_id)
        stopped_s = loop.time() - asked
        out, err = await cancelling.communicate()
        assert cancelling.returncode == 0, out.decode() + err.decode()
        done = json.loads(out)
        status = await wait_state(renter, job_id, {"settled"})
        settled = await renter.send("POST", f"/jobs/{job_id}/cancel", {})
        assert settled.status_code == 409 and "is settled" in settled.text, settled.text

    assert stopped_s < 20, stopped_s  # the CLI's start and the daemon's poll included
    units = status["receipt_units"]
    assert (done["how"], done["state"], done["units"]) == ("stopped", "settled", units)
    assert status["outcome"] == "cancelled" and units >= 3
    split = settle_split(job["lock_lovelace"], job["price_per_unit"], units, job["max_units"],
                         job["fee_allowance"])  # fmt: skip
    assert (done["cost"], done["returned"]) == (split.provider, split.consumer)
    assert done["tx_id"] == status["settle_tx"] and done["blocks"] >= 1
    lock_fee = await tx_fee(devnet, job["lock_tx"], since)
    assert (
        balance(devnet, w.renter.address)
        == start - lock_fee - job["lock_lovelace"] + split.consumer
    )
    assert balance(devnet, w.provider.address) == provider_start + units * job["price_per_unit"]
    assert f"job {job_id}: stopped at its renter's request" in w.daemon.log()


async def wait_log(party: Party, job_id: str, text: str, timeout_s: float = 60) -> None:
    loop = asyncio.get_running_loop()
    until = loop.time() + timeout_s
    while not any(text in line["text"] for line in
                  (await party.send("GET", f"/jobs/{job_id}/logs")).json()):  # fmt: skip
        assert loop.time() < until, f"no {text!r} in job {job_id}'s log"
        await asyncio.sleep(0.2)


async def container_gone(job_id: str, timeout_s: float = 60) -> None:
    """Until the job's container exists no more (stopped, then removed by the runner)."""
    client = docker.from_env()
    loop = asyncio.get_running_loop()
    until = loop.time() + timeout_s
    wanted = {"label": f"{LABEL_JOB}={job_id}"}
    while client.containers.list(all=True, filters=wanted, sparse=True):
        assert loop.time() < until, f"job {job_id}: its container is still there"
        await asyncio.sleep(0.1)
