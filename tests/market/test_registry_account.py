"""A renter's sealed registry account on the market: only the job's renter hands it in, only
base64 of bounded length is taken, and no answer shows it (the provider's assignment carries it:
`tests/provider/test_registry_private_market.py`). On the session's devnet, over real HTTP, on
SQLite and PostgreSQL."""

from __future__ import annotations

from sqlmodel import Session

from offchain.market.db import make_engine
from offchain.market.models import Job
from offchain.protocol.job.registry_seal import MAX_SEALED_CHARS
from tests.market.client import Party
from tests.market.test_bad_input import refused
from tests.market.test_lifecycle import job_request, offer_terms

SEALED = "c2VhbGVkIHRvIHRoZSBwcm92aWRlcg=="


async def test_only_the_renter_hands_in_a_sealed_account_and_no_answer_shows_it(http, settings):
    provider, consumer = (Party.new(http, settings.identity) for _ in range(2))
    assert (await provider.send("POST", "/offers", offer_terms(provider))).status_code == 201
    quoted = await consumer.send("POST", "/jobs", job_request(consumer))
    job = quoted.json()["job_id"]
    path = f"/jobs/{job}/registry-account"
    assert (await provider.send("POST", path, {"sealed": SEALED})).status_code in (403, 404)
    refused(await consumer.send("POST", path, {"sealed": "not base64!"}), 422, "sealed")
    too_long = {"sealed": "A" * (MAX_SEALED_CHARS + 4)}
    refused(await consumer.send("POST", path, too_long), 422, "sealed")
    assert (await consumer.send("POST", path, {"sealed": SEALED})).status_code == 204
    with Session(make_engine(settings)) as session:
        assert session.get(Job, job).registry_account == SEALED
    for party, asked in ((consumer, f"/jobs/{job}"), (consumer, "/jobs"),
                         (provider, f"/jobs/{job}"), (consumer, f"/api/explorer/jobs/{job}"),
                         (consumer, f"/explorer/jobs/{job}")):  # fmt: skip
        answer = await party.send("GET", asked)
        assert answer.status_code == 200 and SEALED not in answer.text, (asked, answer.text)
