"""Issue 36 with real daemons, the real market, docker and the devnet: a daemon Starts a job
whose escrow has a start deadline before it accepts and runs it (the market follows the
Start; the receipt on the started escrow settles), and a renter's `--failover` replaces a
provider whose daemon was killed once it had offered: the money back right after the start
deadline, the job run by the other daemon, the renter charged once, to the lovelace."""

from __future__ import annotations

import asyncio

from consumer.sdk.failover import submit_with_failover
from offchain.chain.submit import tip_point
from offchain.protocol.job.jobspec import JobSpec
from offchain.protocol.ledger.split import settle_split
from tests.market.client import serve
from tests.protocol.onchain import balance, travel_to, tx_fee
from tests.provider.daemon_harness import (
    CORE_PRICE,
    consumer_of,
    fund_quoted,
    new_provider,
    provider_in,
    renter,
    settling_market,
    spec,
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
                attempts = await failover
                assert [a.outcome for a in attempts] == ["refunded early", "started"]
                final = await consumer.status(attempts[1].job_id)
                async with asyncio.timeout(120):  # run, receipt, the market's settle
                    while final.state != "settled":
                        await asyncio.sleep(0.3)
                        final = await consumer.status(attempts[1].job_id)
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
