"""A renter's second Cancel and the provider's witness to the first, interleaved (issue 20: a
plain read-then-write let the renter's request pair the provider's "signed" with its own unsigned
transaction, and the renter then submitted a Cancel missing the provider's witness). Each
request moves the cancel from the state it read by one conditional UPDATE, on SQLite and
PostgreSQL; the one that lost the race is a 409 and changes nothing."""

from __future__ import annotations

import pytest
from sqlmodel import Session

from offchain.market.db import make_engine
from offchain.market.errors import Conflict
from offchain.market.models import CancelState, Job
from offchain.market.services import cancels
from tests.market.client import Party
from tests.market.test_lifecycle import job_request, offer_terms


async def test_the_request_that_read_a_stale_cancel_changes_nothing(http, settings):
    provider, consumer = (Party.new(http, settings.identity) for _ in range(2))
    assert (await provider.send("POST", "/offers", offer_terms(provider))).status_code == 201
    quoted = await consumer.send("POST", "/jobs", job_request(consumer))
    assert quoted.status_code == 201, quoted.text
    job_id = quoted.json()["job_id"]
    engine = make_engine(settings)
    with Session(engine) as session:
        job = session.get(Job, job_id)
        assert job is not None
        cancels.advance(session, job, CancelState.REQUESTED, "first")
        session.commit()

    with Session(engine) as renter, Session(engine) as daemon:
        renters, daemons = renter.get(Job, job_id), daemon.get(Job, job_id)
        assert renters is not None and daemons is not None  # both read "requested", "first"
        cancels.advance(daemon, daemons, CancelState.SIGNED, "first+witness")
        daemon.commit()
        with pytest.raises(Conflict, match="changed meanwhile"):
            cancels.advance(renter, renters, CancelState.REQUESTED, "second")
        renter.commit()  # nothing pending: the loser was rolled back

    with Session(engine) as session:
        stored = session.get(Job, job_id)
        assert stored is not None
        assert (stored.cancel_state, stored.cancel_tx) == (CancelState.SIGNED, "first+witness")
        cancels.advance(session, stored, CancelState.REQUESTED, "second")  # read fresh: moves
        session.commit()
        session.refresh(stored)
        assert (stored.cancel_state, stored.cancel_tx) == (CancelState.REQUESTED, "second")
    engine.dispose()
