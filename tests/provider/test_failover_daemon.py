"""Issue 36 with real daemons, the real market, docker and the devnet: a daemon Starts a job
whose escrow has a start deadline before it accepts and runs it (the market follows the
Start; the receipt on the started escrow settles), and a renter's `--failover` replaces a
provider that lets the job down: one whose daemon was killed once it had offered (the money
back right after the start deadline), one stopped (SIGTERM) while the job ran (its receipt
says `stopped`: the seconds it ran billed, the rest back by the settle) and one killed
(SIGKILL) while the job ran (no receipt: refunded at the close). Each time the job runs again
on another daemon, and the renter pays the fees, what the receipts billed and one job, to
the lovelace."""

from __future__ import annotations

import asyncio
import signal

from consumer.sdk.failover import submit_with_failover
from consumer.sdk.job_record import JobRecord
from consumer.sdk.session import Consumer
from offchain.chain.submit import tip_point
from offchain.protocol.job.jobspec import JobSpec
from offchain.protocol.ledger.split import settle_split
from tests.market.client import serve
from tests.protocol.onchain import balance, travel_to, tx_fee
from tests.provider.daemon_harness import (
    CORE_PRICE,
    ProviderProcess,
    consumer_of,
    fund_quoted,
    new_provider,
    provider_in,
    renter,
    settling_market,
    spec,
    wait_container_running,
    wait_state,
)

START_WITHIN_S = 60


async def test_a_daemon_starts_a_timed_escrow_before_it_runs_the_job(devnet, tmp_path, busybox):
    deployment_file, deployment, settings = await settling_market(devnet, tmp_path)
    with serve(settings) as url:
        daemon, _ = await new_provider(devnet, tmp_path, deployment_file, url)
        try:
            await daemon.start().logged("offer published")
            async with consumer_of(devnet, url) as consumer:
                quoted = await consumer.send("POST", "/jobs", {
                    "spec": spec(busybox, "true"), "start_within_s": START_WITHIN_S,
                    "consumer_address": str(consumer.wallet.address)})  # fmt: skip
                assert quoted.status_code == 201, quoted.text
                job = await fund_quoted(devnet, deployment, consumer, quoted.json()["job_id"])
                assert job.params["start_deadline"] > 0
                settled = await wait_state(consumer, job.job, {"settled"})
            await daemon.logged("started on chain")
            assert settled["escrow"] != job.escrow  # the started escrow, which settled
        finally:
            daemon.stop()
            daemon.reap()


async def test_a_killed_providers_job_fails_over_to_another_and_is_paid_once(
    devnet, tmp_path, busybox
):
    deployment_file, deployment, settings = await settling_market(devnet, tmp_path)
    job_spec = JobSpec.model_validate(spec(busybox, "true"))
    with serve(settings) as url:
        silent = await provider_in(devnet, tmp_path, "silent", deployment_file, url)
        silent.stop()  # killed once it offered: its offer stays online until its heartbeat ages
        second = None
        try:
            async with renter(devnet, deployment, url, tmp_path / "renter") as consumer:
                start = balance(devnet, consumer.key.address)
                since = await tip_point(devnet.url)
                failover = asyncio.create_task(
                    submit_with_failover(consumer, job_spec, 1, START_WITHIN_S)
                )
                async with asyncio.timeout(60):  # the first lock, for the killed provider
                    while not any(r.escrow for r in consumer.store.all()):
                        await asyncio.sleep(0.2)
                second = await provider_in(devnet, tmp_path, "second", deployment_file, url)
                (first,) = consumer.store.all()
                await travel_to(devnet, first.datum.start_deadline + 1)
                attempts = await failover  # watched through the run to its settle
                assert [a.outcome for a in attempts] == ["refunded early", "ran"]
                final = await consumer.status(attempts[1].job_id)
                assert final.state == "settled"
                kept = consumer.store.get(attempts[1].job_id)
                paid = [first.lock_tx_id, attempts[0].refund_tx, kept.lock_tx_id]
                fees = sum([await tx_fee(devnet, tx_id, since) for tx_id in paid if tx_id])
                assert final.receipt_units is not None
                split = settle_split(kept.lovelace, kept.datum.price_per_unit,
                                     final.receipt_units, kept.datum.max_units,
                                     kept.datum.fee_allowance)  # fmt: skip
                assert kept.datum.price_per_unit == CORE_PRICE
                charged = start - balance(devnet, consumer.key.address)
                assert charged == fees + kept.lovelace - split.consumer
                assert charged - fees == split.provider + kept.datum.fee_allowance
        finally:
            for daemon in (silent, second):
                if daemon is not None:
                    daemon.stop()
                    daemon.reap()  # what its jobs left: containers, mounted workspaces


async def test_a_provider_that_stops_or_dies_mid_run_is_replaced_and_billed_for_what_ran(
    devnet, tmp_path, busybox
):
    """Three daemons offer alike; whichever the market matches first is stopped (SIGTERM, no
    grace) while the job runs, the next one killed (SIGKILL) while it runs, and the third runs
    it to its end. The stopped run's receipt settles (its seconds billed); the killed run's
    escrow is refunded by the renter at its close (chain time moved there); the renter pays
    three locks', one refund's fees, what the two receipts billed and their fee allowances."""
    deployment_file, deployment, settings = await settling_market(devnet, tmp_path)
    job_spec = JobSpec.model_validate(spec(busybox, "sleep 6"))
    daemons: dict[str, ProviderProcess] = {}
    with serve(settings) as url:
        try:
            for name in ("p1", "p2", "p3"):
                home = tmp_path / name
                home.mkdir()
                daemon, wallet = await new_provider(devnet, home, deployment_file, url,
                                                    grace_ms=0)  # fmt: skip
                daemons[wallet.key_hash.payload.hex()] = daemon.start()
            for daemon in daemons.values():
                await daemon.logged("offer published")
            async with renter(devnet, deployment, url, tmp_path / "renter") as consumer:
                start = balance(devnet, consumer.key.address)
                since = await tip_point(devnet.url)
                failover = asyncio.create_task(
                    submit_with_failover(consumer, job_spec, 2, START_WITHIN_S)
                )
                stopped = await running(consumer, 1)
                daemons[stopped.provider_id].signal(signal.SIGTERM)  # stops it, delivers
                killed = await running(consumer, 2)
                daemons[killed.provider_id].stop()  # SIGKILL: no receipt ever
                await travel_to(devnet, consumer.store.get(killed.job_id).datum.close + 1)
                attempts = await failover
                assert [a.outcome for a in attempts] == [
                    "provider failed", "refunded after the close", "ran"]  # fmt: skip
                assert "stopped by its provider" in attempts[0].detail
                assert [a.job_id for a in attempts[:2]] == [stopped.job_id, killed.job_id]
                assert len({a.provider_id for a in attempts}) == 3
                kept = consumer.store.get(attempts[2].job_id)
                paid = [
                    stopped.lock_tx_id,
                    killed.lock_tx_id,
                    attempts[1].refund_tx,
                    kept.lock_tx_id,
                ]
                fees = sum([await tx_fee(devnet, tx_id, since) for tx_id in paid if tx_id])
                billed = 0
                for record in (stopped, kept):
                    units = (await consumer.status(record.job_id)).receipt_units
                    assert units is not None and units > 0
                    billed += units * record.datum.price_per_unit + record.datum.fee_allowance
                assert balance(devnet, consumer.key.address) == start - fees - billed
        finally:
            for daemon in daemons.values():
                daemon.stop()
                daemon.reap()


async def running(consumer: Consumer, nth: int) -> JobRecord:
    """The renter's `nth` locked job once its container runs on its provider's daemon."""
    async with asyncio.timeout(120):
        while len(locked := [r for r in consumer.store.all() if r.escrow]) < nth:
            await asyncio.sleep(0.2)
    record = sorted(locked, key=lambda r: r.created_ms)[nth - 1]
    await wait_container_running(record.job_id, timeout_s=120)
    return record
