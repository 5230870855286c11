"""The live streams' event feed: an event whose id commits after a higher one the feed has
passed (PostgreSQL takes ids at insert, not at commit) never wakes its stream through the
feed, so each stream reads its own job again every RECHECK_S and still ends."""

from __future__ import annotations

import asyncio

from sqlalchemy import create_engine
from sqlmodel import Session, SQLModel

from offchain.market.models import JobEvent
from offchain.market.services import event_feed
from offchain.market.services.event_feed import EventFeed


def add_event(engine, event_id: int, job_id: str) -> None:
    with Session(engine) as session:
        session.add(JobEvent(id=event_id, job_id=job_id, at_ms=0, to_state="settled",
                             cause="chain"))  # fmt: skip
        session.commit()


async def test_an_event_committed_behind_the_feeds_cursor_still_reaches_its_stream(
    tmp_path, monkeypatch
):
    engine = create_engine(f"sqlite:///{tmp_path / 'events.db'}")  # no foreign keys: no jobs
    SQLModel.metadata.create_all(engine, tables=[JobEvent.__table__])
    monkeypatch.setattr(event_feed, "RECHECK_S", 0.3)
    add_event(engine, 10, "other")  # the feed's cursor starts past it
    feed = EventFeed(engine, every_s=0.01)
    async with feed.watch("watched") as woken:
        add_event(engine, 5, "watched")  # committed late, behind the cursor
        await asyncio.sleep(0.1)  # several of the feed's ticks
        assert not woken.is_set()  # the feed cannot see it: only the recheck can
        await asyncio.wait_for(feed.wait(woken), 10)  # returns: the stream reads its job again
