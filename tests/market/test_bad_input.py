"""Every kind of bad request gets its 4xx naming the field, and none changes any state."""

from __future__ import annotations

import json
import time

from sqlmodel import Session, func, select

from offchain.market.db import make_engine
from offchain.market.models import Blob, Job, JobEvent, LogLine, Offer, Provider
from tests.market.client import Party
from tests.market.test_lifecycle import SPEC, job_request, offer_terms

HOUR_MS = 3_600_000


def snapshot(settings) -> dict:
    """Every row that means something (nonces aside: a nonce is spent once it is seen)."""
    with Session(make_engine(settings)) as session:
        counts = {
            table.__name__: session.exec(select(func.count()).select_from(table)).one()
            for table in (Provider, Offer, Job, JobEvent, LogLine, Blob)
        }
        return {**counts, "states": sorted(session.exec(select(Job.id, Job.state)).all())}


def refused(response, status: int, field: str | None = None) -> None:
    assert response.status_code == status, response.text
    if field is not None:
        locs = [problem["loc"] for problem in response.json()["detail"]]
        assert any(field in loc for loc in locs), locs


async def test_bad_requests_are_refused_and_change_nothing(http, settings):
    provider, consumer, stranger = (Party.new(http, settings.identity) for _ in range(3))
    await provider.send("POST", "/offers", offer_terms(provider))
    quoted = await consumer.send("POST", "/jobs", job_request(consumer))
    assert quoted.status_code == 201, quoted.text
    job = quoted.json()["job_id"]
    before = snapshot(settings)

    # 422: malformed, unknown fields, impossible requirements
    refused(await provider.send("POST", "/offers", offer_terms(provider, gpus_typo=1)),
            422, "gpus_typo")  # fmt: skip
    refused(await consumer.send("POST", "/jobs", job_request(consumer, gpu=1)), 422, "gpu")
    impossible = {**SPEC["resources"], "gpus": 0, "min_vram_mib": 1024}
    refused(await consumer.send("POST", "/jobs", job_request(consumer, resources=impossible)),
            422, "resources")  # fmt: skip
    refused(await consumer.send("POST", "/jobs", raw=b"{not json"), 422)
    theirs = {**job_request(consumer), "consumer_address": str(stranger.wallet.address)}
    refused(await consumer.send("POST", "/jobs", theirs), 422, "consumer_address")
    refused(await consumer.send("POST", f"/jobs/{job}/escrow", {"escrow": "nothex"}),
            422, "escrow")  # fmt: skip
    for padded in ("x" + "ab" * 32 + "#0", "ab" * 32 + "#0x", "ab" * 32 + "#0\n"):
        # a pattern holds for the whole field, not somewhere in it (pydantic searches)
        refused(await consumer.send("POST", f"/jobs/{job}/escrow", {"escrow": padded}),
                422, "escrow")  # fmt: skip
    hand_in = {"units": 1, "result_hash": "zz" + "0" * 64, "evidence_hash": "0" * 64,
               "signature": "0" * 128}  # fmt: skip
    refused(await provider.send("POST", f"/jobs/{job}/receipt", hand_in), 422, "result_hash")
    # 409: no offer can take it (and why), an escrow that is not on chain
    refused(await consumer.send("POST", "/jobs", job_request(consumer, max_price_lovelace=1)),
            409, "spec")  # fmt: skip
    refused(await consumer.send("POST", f"/jobs/{job}/escrow", {"escrow": "ab" * 32 + "#0"}),
            409, "escrow")  # fmt: skip

    # 401: missing, tampered, stale, for another market, another key
    body = json.dumps(job_request(consumer)).encode()
    refused(await http.post("/jobs", content=body), 401, "signature")
    headers = consumer.headers("POST", "/jobs", body)
    refused(await http.post("/jobs", content=body + b" ", headers=headers), 401, "body_sha256")
    stale = await consumer.send(
        "POST",
        "/jobs",
        job_request(consumer),
        timestamp_ms=time.time_ns() // 1_000_000 - 2 * HOUR_MS,  # the market's clock, not
        # the chain's: the session's devnet may have travelled ahead (test_validators_devnet)
    )
    refused(stale, 401, "timestamp_ms")  # fmt: skip
    elsewhere = Party(consumer.wallet, http, "another-market")
    refused(await elsewhere.send("GET", f"/jobs/{job}"), 401, "market")
    mixed = {**consumer.headers("GET", f"/jobs/{job}")}
    mixed["X-Unchained-Key"] = stranger.headers("GET", f"/jobs/{job}")["X-Unchained-Key"]
    refused(await http.get(f"/jobs/{job}", headers=mixed), 401, "key")

    # 409: the same signed request twice
    once = consumer.headers("GET", f"/jobs/{job}")
    assert (await http.get(f"/jobs/{job}", headers=once)).status_code == 200
    refused(await http.get(f"/jobs/{job}", headers=once), 409, "nonce")

    # 413: a body over the limit
    huge = job_request(consumer, env={"BLOB": "x" * settings.body_limit_bytes})
    refused(await consumer.send("POST", "/jobs", huge), 413, "body")

    # 403: another party's job, its escrow and its results
    refused(await stranger.send("GET", f"/jobs/{job}"), 403, "job_id")
    refused(await stranger.send("GET", f"/jobs/{job}/result"), 403, "job_id")
    refused(await stranger.send("GET", f"/jobs/{job}/logs"), 403, "job_id")
    refused(await stranger.send("POST", f"/jobs/{job}/escrow", {"escrow": "ab" * 32 + "#0"}),
            403, "job_id")  # fmt: skip
    refused(await stranger.send("POST", f"/jobs/{job}/start"), 403, "job_id")

    # 404: unknown ids
    refused(await consumer.send("GET", "/jobs/" + "0" * 32), 404, "job_id")
    refused(await stranger.send("POST", "/providers/heartbeat"), 404, "provider")

    assert snapshot(settings) == before
