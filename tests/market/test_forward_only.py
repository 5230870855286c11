"""A closed job stays closed: the API moves a job forward only (409 naming its state), and the
batcher drops a receipt it cannot settle, saying why in the job's timeline, so no number of bad
receipts ahead of a good one holds it up. On the session's devnet, over real HTTP, on SQLite
and PostgreSQL."""

from __future__ import annotations

import httpx
from sqlmodel import Session, col, select

from offchain.chain.submit import submit_and_wait
from offchain.market.db import make_engine
from offchain.market.models import Job, JobState
from offchain.protocol.tx import escrow as escrows
from offchain.protocol.tx.txbuild import sign_tx
from tests.market.client import serve
from tests.market.flow import (
    accept,
    deliver,
    leader_settings,
    provider_with_offer,
    quote_and_lock,
    send_receipt,
    timeline,
    wait_for,
)


def refused_as(response: httpx.Response, state: str) -> None:
    assert response.status_code == 409, response.text
    (problem,) = response.json()["detail"]
    assert problem["loc"][-1] == "state" and f"is {state}" in problem["msg"], problem


async def test_a_cancelled_job_cannot_be_started_failed_or_handed_a_receipt(
    devnet, market_deployment, settings, tmp_path
):
    """The probe's sequence: the job runs, consumer and provider cancel it on chain, then the
    provider starts it again and hands in a receipt. Every move is refused, the job stays
    cancelled."""
    made, _ = await leader_settings(settings, devnet, tmp_path)
    with serve(made) as url:
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            provider = await provider_with_offer(devnet, http, made.identity)
            deal = await quote_and_lock(devnet, market_deployment, http, made.identity)
            await wait_for(deal.consumer, deal.job, "funded")
            await accept(provider, market_deployment, deal)
            unsigned = escrows.cancel(
                devnet.context(), market_deployment, deal.escrow, deal.consumer.wallet.address
            )
            cancel = sign_tx(unsigned, deal.consumer.wallet.key, provider.wallet.key)
            await submit_and_wait(devnet.url, cancel, timeout_s=30)
            await wait_for(deal.consumer, deal.job, "cancelled")

            refused_as(await provider.send("POST", f"/jobs/{deal.job}/start"), "cancelled")
            refused_as(await send_receipt(provider, market_deployment, deal), "cancelled")
            failure = {"exit_code": 1, "reason": "revived"}
            refused_as(
                await provider.send("POST", f"/jobs/{deal.job}/failure", failure), "cancelled"
            )
            assert (await wait_for(deal.consumer, deal.job, "cancelled"))["receipt_units"] is None
    assert timeline(made, deal.job)[-1].to_state == JobState.CANCELLED


def revive(settings, job_ids: list[str]) -> None:
    """What a market before this fix let the API do (a settled job moved back to completed,
    with its receipt), written straight to the database, older than any other receipt."""
    engine = make_engine(settings)
    with Session(engine) as session:
        for age, job in enumerate(session.exec(select(Job).where(col(Job.id).in_(job_ids)))):
            job.state, job.settle_tx, job.updated_at_ms = JobState.COMPLETED, None, age
            session.add(job)
        session.commit()
    engine.dispose()


async def test_more_bad_receipts_than_a_batch_do_not_hold_up_a_good_one(
    devnet, market_deployment, settings, tmp_path
):
    made, _ = await leader_settings(settings, devnet, tmp_path, settle_batch_max=2)
    with serve(made) as url:
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            provider = await provider_with_offer(devnet, http, made.identity)
            deals = [
                await quote_and_lock(devnet, market_deployment, http, made.identity)
                for _ in range(4)
            ]
            for deal in deals:
                await wait_for(deal.consumer, deal.job, "funded")
            *spent, honest = deals
            for deal in spent:
                await deliver(provider, market_deployment, deal)
                await wait_for(deal.consumer, deal.job, "settled")
            revive(made, [deal.job for deal in spent])
            await deliver(provider, market_deployment, honest)
            await wait_for(honest.consumer, honest.job, "settled")
            for deal in spent:
                dropped = timeline(made, deal.job)[-1]
                assert dropped.to_state == dropped.from_state == JobState.COMPLETED
                assert dropped.detail == (
                    f"not settled by the market: its escrow {deal.ref} is spent "
                    "(the follower records by what)"
                )
