"""One lock funds exactly the job it was built for: two identical signed requests back to back
(one tip read, one offer) get escrow terms that differ, and each lock funds its own job
whichever is locked first. On the session's devnet, over real HTTP, on SQLite and PostgreSQL."""

from __future__ import annotations

import httpx

from tests.market.client import Party, serve
from tests.market.flow import leader_settings, lock, provider_with_offer, wait_for
from tests.market.test_lifecycle import job_request
from tests.protocol.onchain import wallet


async def test_identical_requests_get_their_own_terms_and_each_lock_funds_its_own_job(
    devnet, market_deployment, settings, tmp_path
):
    made, _ = await leader_settings(settings, devnet, tmp_path)
    with serve(made) as url:
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            await provider_with_offer(devnet, http, made.identity)
            consumer = Party.new(http, made.identity, await wallet(devnet))
            request = job_request(consumer)
            first, second = [
                (await consumer.send("POST", "/jobs", request)).json()["job_id"] for _ in range(2)
            ]
            terms = [
                (await consumer.send("GET", f"/jobs/{job}/escrow")).json()
                for job in (first, second)
            ]
            assert terms[0] != terms[1]
            assert {k for k in terms[0] if terms[0][k] != terms[1][k]} == {"deadline"}

            # the second quote is locked first: it must not fund the first job
            locks = {
                job: await lock(devnet, market_deployment, consumer, job) for job in (second, first)
            }
            for job, locked in locks.items():
                funded = await wait_for(consumer, job, "funded")
                assert funded["escrow"] == locked.ref
