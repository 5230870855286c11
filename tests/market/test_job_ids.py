"""A job named as people copy it, over real HTTP on SQLite and PostgreSQL (issue 19): the signed
`/jobs/{id}` routes take a unique prefix of the job id (8 hex digits or more) and the escrow
`TXID#IX`; a prefix two jobs share is a 409 saying how many, an unknown one a 404, each naming
`job_id`; who may see the job is checked as before."""

from __future__ import annotations

from urllib.parse import quote

from sqlmodel import Session

from offchain.market.db import make_engine
from offchain.market.models import Job
from tests.market.client import Party
from tests.market.test_bad_input import refused
from tests.market.test_lifecycle import job_request, offer_terms

ESCROW = "9a" * 32 + "#0"
SHARED = "abcdef01"  # the first 8 hex digits of two jobs' ids


def plant(settings, job_id: str) -> None:
    """The escrow the chain follower records once the lock lands (here written directly: what
    is tested is finding the job by it), and two more jobs of the same consumer whose ids
    begin alike."""
    engine = make_engine(settings)
    with Session(engine) as session:
        job = session.get(Job, job_id)
        assert job is not None
        fields = {name: getattr(job, name) for name in Job.model_fields}
        for twin in (f"{SHARED}{'0' * 24}", f"{SHARED}{'1' * 24}"):
            session.add(Job(**fields | {"id": twin, "escrow_terms": None}))
        job.escrow_ref = ESCROW
        session.add(job)
        session.commit()
    engine.dispose()


async def test_a_job_by_prefix_or_escrow_ref_and_a_clear_refusal_otherwise(http, settings):
    provider, consumer, stranger = (Party.new(http, settings.identity) for _ in range(3))
    assert (await provider.send("POST", "/offers", offer_terms(provider))).status_code == 201
    quoted = await consumer.send("POST", "/jobs", job_request(consumer))
    assert quoted.status_code == 201, quoted.text
    job_id = quoted.json()["job_id"]
    plant(settings, job_id)

    for named in (job_id, job_id[:8], job_id[:8].upper(), job_id[:20], ESCROW, ESCROW.upper()):
        path = f"/jobs/{quote(named, safe='')}"
        status = await consumer.send("GET", path)
        assert status.status_code == 200 and status.json()["id"] == job_id, (named, status.text)
        assert (await consumer.send("GET", f"{path}/logs")).json() == []
        assert (await consumer.send("GET", f"{path}/signatures")).json()["escrow"] == ESCROW
        refused(await stranger.send("GET", path), 403, "job_id")  # still the parties' only

    shared = await consumer.send("GET", f"/jobs/{SHARED}")
    refused(shared, 409, "job_id")
    assert f"{SHARED} names 2 jobs" in shared.json()["detail"][0]["msg"]
    for unknown in ("f" * 8, job_id[:7], "9a" * 32 + "#1", "nope"):
        refused(await consumer.send("GET", f"/jobs/{quote(unknown, safe='')}"), 404, "job_id")
    refused(await http.get(f"/jobs/{job_id[:8]}"), 401)  # unsigned: refused before any lookup
