"""One reader that tells every live stream of the process when its job has new events.

Each open stream used to poll the database for its job's events, a read per stream four times
a second: 200 idle streams kept a third of a core busy, a thousand would take more than one.
The feed reads once per tick which jobs have events it has not seen (one short session, by
the events' primary key) and wakes the streams watching those jobs; a stream reads its own
events only when woken, in a short session of its own, and every RECHECK_S anyway: on
PostgreSQL an event's id is taken at insert, so one can commit after a higher id the feed has
already passed, and only the stream's own read would see it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from sqlalchemy import Engine, func
from sqlmodel import Session, col, select
from starlette.concurrency import run_in_threadpool

from offchain.market.models import JobEvent

EVERY_S = 0.25
RECHECK_S = 15.0
log = logging.getLogger(__name__)


class EventFeed:
    """The process's feed over `engine`; runs while any stream watches (started by the first)."""

    def __init__(self, engine: Engine, every_s: float = EVERY_S) -> None:
        self.engine, self.every_s = engine, every_s
        self.watching: dict[str, set[asyncio.Event]] = {}
        self.ready: asyncio.Future[None] | None = None  # the running reader has its cursor
        self.reader: asyncio.Task[None] | None = None

    @contextlib.asynccontextmanager
    async def watch(self, job_id: str) -> AsyncIterator[asyncio.Event]:
        """An event the feed sets whenever `job_id` has new events. Entered, the feed is past
        every event stored before: clear it, read the job's events, wait for it, again."""
        woken = asyncio.Event()
        self.watching.setdefault(job_id, set()).add(woken)
        try:
            if self.ready is None:
                self.ready = asyncio.get_running_loop().create_future()
                self.reader = asyncio.create_task(self._read(self.ready))
            await asyncio.shield(self.ready)
            yield woken
        finally:
            watchers = self.watching[job_id]
            watchers.discard(woken)
            if not watchers:
                del self.watching[job_id]

    @staticmethod
    async def wait(woken: asyncio.Event) -> None:
        """Until the feed wakes `woken`, or RECHECK_S pass (an event committed out of id order
        is then read by the stream itself)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(woken.wait(), RECHECK_S)

    async def _read(self, ready: asyncio.Future[None]) -> None:
        try:
            cursor = await run_in_threadpool(self._last_id)
            ready.set_result(None)
            while self.watching:  # the check and the reset below run with no await between
                await asyncio.sleep(self.every_s)
                try:
                    cursor, changed = await run_in_threadpool(self._changed, cursor)
                except Exception:  # the database is away a moment: streams wait, then go on
                    log.exception("reading new job events")
                    continue
                for job_id in changed:
                    for woken in self.watching.get(job_id, ()):
                        woken.set()
        except BaseException:
            ready.cancel()  # streams still waiting for it end; the next stream starts anew
            raise
        finally:
            self.ready = self.reader = None

    def _last_id(self) -> int:
        with Session(self.engine) as session:
            return session.exec(select(func.max(JobEvent.id))).one() or 0

    def _changed(self, cursor: int) -> tuple[int, set[str]]:
        """The newest event id and the jobs with events after `cursor`."""
        query = select(JobEvent.id, JobEvent.job_id).where(col(JobEvent.id) > cursor)
        with Session(self.engine) as session:
            rows = session.exec(query).all()
        ids = (event_id for event_id, _ in rows if event_id is not None)  # stored rows have one
        return max(ids, default=cursor), {job for _, job in rows}
