"""Leadership: of all the market processes sharing one database, exactly one follows the chain
and runs the scheduled work.

On PostgreSQL the leader holds a session advisory lock on a connection of its own for as long
as it leads: when the process dies (SIGKILL included) the server drops the connection and the
lock with it, and the next process to try takes over. On SQLite the processes share one file
on one machine, so an exclusive `flock` beside the database plays the same part.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import logging
from typing import IO, Protocol

from apscheduler.schedulers.background import BackgroundScheduler
from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import DBAPIError

from offchain.chain.context import track, untrack
from offchain.market.services.chain import Chain
from offchain.market.services.follower import ChainFollower
from offchain.market.services.scheduler import start_scheduler
from offchain.market.services.settlement import Batcher, market_wallet
from offchain.market.settings import MarketSettings

log = logging.getLogger(__name__)
LOCK_KEY = int.from_bytes(hashlib.blake2b(b"unchained/market-leader", digest_size=8).digest(),
                          "big", signed=True)  # fmt: skip


class Lock(Protocol):
    def acquire(self) -> bool:
        """Take the lock if nobody holds it; True when this process now holds it."""

    def held(self) -> bool:
        """Whether this process still holds it."""

    def release(self) -> None: ...


class AdvisoryLock:
    """`pg_try_advisory_lock` on a dedicated connection, held while leading."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.connection: Connection | None = None

    def acquire(self) -> bool:
        connection = self.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        query = text("SELECT pg_try_advisory_lock(:key)")
        if connection.execute(query, {"key": LOCK_KEY}).scalar():
            self.connection = connection
            return True
        connection.close()
        return False

    def held(self) -> bool:
        if self.connection is None:
            return False
        try:
            self.connection.execute(text("SELECT 1"))
        except DBAPIError:
            self.release()
            return False
        return True

    def release(self) -> None:
        if self.connection is not None:
            with contextlib.suppress(DBAPIError):
                self.connection.close()  # the server drops the session's advisory locks
            self.connection = None


class FileLock:
    """An exclusive `flock` on a file beside the SQLite database."""

    def __init__(self, settings: MarketSettings) -> None:
        self.path = settings.data_dir / "leader.lock"
        self.file: IO[bytes] | None = None

    def acquire(self) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        file = self.path.open("ab")
        try:
            fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            file.close()
            return False
        self.file = file
        return True

    def held(self) -> bool:
        return self.file is not None

    def release(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None


def leader_lock(engine: Engine, settings: MarketSettings) -> Lock:
    return FileLock(settings) if engine.dialect.name == "sqlite" else AdvisoryLock(engine)


class Background:
    """The leader's work: the chain follower (a task on the service's event loop) and the
    scheduler (worker threads). Every process runs this; only the leader gets past `acquire`."""

    def __init__(self, settings: MarketSettings, engine: Engine, chain: Chain) -> None:
        self.settings, self.engine, self.chain = settings, engine, chain
        self.lock = leader_lock(engine, settings)
        self.follower = ChainFollower(
            engine, chain.deployment, settings.confirmations, settings.rollback_blocks
        )
        wallet = market_wallet(settings, chain)
        self.batcher = None if wallet is None else Batcher(engine, chain, wallet, settings)
        self.leading = False

    async def run(self) -> None:
        """Try to lead every `leader_poll_ms`; lead until the lock is lost or the task ends."""
        poll_s = self.settings.leader_poll_ms / 1000
        while True:
            if await self._bid():
                try:
                    await self._lead(poll_s)
                finally:
                    await asyncio.to_thread(self.lock.release)
            await asyncio.sleep(poll_s)

    async def _bid(self) -> bool:
        """Try to take the lock; a database that does not answer is a lost bid, tried again
        at the next poll (raised, it would end the bidding for the life of the process)."""
        try:
            return await asyncio.to_thread(self.lock.acquire)
        except DBAPIError as exc:
            log.warning("no bid for leadership, the database does not answer: %s", exc)
            return False

    async def _lead(self, poll_s: float) -> None:
        log.info("this process leads: following the chain, running the scheduled work")
        self.leading = True
        follower = asyncio.create_task(self.follower.run(self.settings.ogmios_url))
        scheduler: BackgroundScheduler | None = None
        if self.batcher is not None:  # its wallet's UTxOs, read every run, from chain-sync
            track(self.chain.context, [self.batcher.wallet.address])
        try:
            scheduler = await asyncio.to_thread(
                start_scheduler, self.engine, self.chain, self.settings, self.batcher
            )
            while await asyncio.to_thread(self.lock.held):
                await asyncio.sleep(poll_s)
            log.warning("leadership lost: stopping the follower and the scheduled work")
        finally:
            self.leading = False
            follower.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await follower
            if scheduler is not None:
                await asyncio.to_thread(scheduler.shutdown)
            untrack(self.chain.context)
