"""The daemon against a market it must not trust, and a spent escrow it must not misread.

A misbehaving market is a tiny fake here, not the real one: the real market checks every
reported escrow against its quote on chain before a job is funded, so it never assigns an
unsafe escrow and cannot be made to. The escrows are real (locked on the devnet past the
builder's own checks); the fake hands them out as assignments, answers the offer and the
heartbeat, and records every request. The daemon must refuse each with its reason, and sign
nothing (no journal entry) and send nothing about a job whose escrow is not sound for it (not
its key or address, not the job, a negative price). An escrow that is sound but past its
deadline is only refused: the daemon releases it at once with a zero-unit receipt (the
renter's money back before the close), which pays the provider nothing.

A refund after the close is not earnings: the daemon reads the spending transaction."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import pytest

from offchain.chain.utxo import parse_out_ref, utxo_at
from offchain.protocol.tx import escrow as escrows
from offchain.protocol.tx.txbuild import Clock
from provider.daemon.journal import Journal
from tests.protocol.onchain import confirm, travel_to, wallet
from tests.provider.chain import deployed
from tests.provider.daemon_harness import (
    MINUTE_MS,
    assignment,
    consumer_of,
    daemon_on_market,
    fake_market_server,
    lock_escrow,
    new_provider,
    quiet_market,
    request_and_lock,
    safe_terms,
    spec,
    wait_state,
)
from tests.provider.test_daemon import cli
from unchained.cli import app


@pytest.fixture
def fake_market() -> Iterator[tuple[str, list[dict[str, Any]], list[str]]]:
    """(url, assignments to hand out once, requests seen as 'METHOD path')."""
    with fake_market_server() as served:
        yield served


async def lock_unsafe(devnet, deployment, consumer, terms: dict[str, Any], monkeypatch) -> str:
    """Lock an escrow with `terms` as they are: the builder's own checks are switched off,
    since a misbehaving party does not use them."""
    with monkeypatch.context() as patch:
        patch.setattr(escrows, "check_escrow", lambda *_: None)
        return await lock_escrow(devnet, deployment, consumer, terms)


async def test_a_misbehaving_market_gets_nothing_signed(
    devnet, tmp_path, busybox, fake_market, monkeypatch
):  # fmt: skip
    url, pending, seen = fake_market
    deployment_file = tmp_path / "deployment.json"
    deployment = await deployed(devnet, deployment_file)
    daemon, provider = await new_provider(devnet, tmp_path, deployment_file, url)
    consumer, stranger = await wallet(devnet), await wallet(devnet)
    job = spec(busybox, "echo never")
    now = Clock.now(devnet.context()).tip_ms
    safe = safe_terms(consumer, provider, job, now)
    unsafe = {
        "negative price": ({"price_per_unit": -1}, "negative price_per_unit"),
        "deadline passed": ({"deadline": now - MINUTE_MS}, "has passed"),
        "another address": ({"provider": stranger.address}, "it pays"),
        "another job": ({"job_id": hashlib.sha256(b"another job").digest()}, "the spec's is"),
        "another key": ({"provider_vkey": stranger.vkey}, "it names"),
    }  # fmt: skip
    refs = {}
    for name, (change, _) in unsafe.items():
        refs[name] = await lock_unsafe(devnet, deployment, consumer, {**safe, **change},
                                       monkeypatch)  # fmt: skip
    try:
        await daemon.start().logged("offer published")
        pending.extend(
            assignment(f"job_{n}", job, refs[name], {**safe, **change})
            for n, (name, (change, _)) in enumerate(unsafe.items())
        )  # fmt: skip
        for n, (name, (_, reason)) in enumerate(unsafe.items()):
            await daemon.logged(f"job job_{n} refused", timeout_s=30)
            refused = next(line for line in daemon.log().splitlines()
                           if f"job job_{n} refused" in line)  # fmt: skip
            assert reason in refused, (name, refused)
        await daemon.logged("its zero receipt is with the market", timeout_s=30)
    finally:
        daemon.stop()
        assert daemon.reap() == {"containers": [], "workspaces": [], "cgroups": []}
    expired = f"job_{list(unsafe).index('deadline passed')}"
    (released,) = Journal(daemon.state_dir).entries()  # no acceptance, no other signature
    assert (released.job_id, released.receipt.units) == (expired, 0), released
    about_jobs = [line for line in seen if "/jobs/" in line]
    # no acceptance, start, log or result sent; only the expired job's release
    assert {line.split("/")[2] for line in about_jobs} <= {expired}, about_jobs
    assert f"POST /jobs/{expired}/failure" in about_jobs, about_jobs
    assert any(line.startswith("GET /providers/assignments") for line in seen)


async def test_a_refund_after_the_close_is_not_counted_as_earnings(devnet, tmp_path, busybox):
    deployment_file, deployment, settings = await quiet_market(devnet, tmp_path)
    async with daemon_on_market(
        devnet, tmp_path, deployment_file, settings, leaves_nothing=False
    ) as (daemon, _, url):
        async with consumer_of(devnet, url) as consumer:
            job = await request_and_lock(devnet, deployment, consumer, spec(busybox, "true"))
            await wait_state(consumer, job.job, {"completed"})
        await daemon.logged("units signed")
        # past the close in one step: the payout watcher's window (close - margin) is
        # skipped, and the consumer takes the escrow back
        await travel_to(devnet, job.params["deadline"] + job.params["settle_window"] + 1_000)
        context = devnet.context()
        escrow = utxo_at(context, parse_out_ref(job.escrow))
        address = consumer.wallet.address
        refund = escrows.refund(context, deployment, escrow, address)
        await confirm(devnet, consumer.wallet.sign(refund))
        await daemon.logged("without a settlement to this provider", timeout_s=60)
        status = cli.invoke(app, [
            "provider", "status", "--config", str(daemon.config), "--ogmios-url", devnet.url,
            "--deployment", str(daemon.deployment_file)])  # fmt: skip
        assert "earnings settled: 0.000000 ADA" in status.output, status.output
        assert f"nothing earned): 1 job(s): {job.job}" in status.output, status.output
        assert "earnings pending: 0.000000 ADA" in status.output, status.output
        entry = Journal(daemon.state_dir).get(job.job)
        assert entry.stage == "refunded" and entry.settled_lovelace == 0
        assert entry.settle_tx == str(refund.id)
