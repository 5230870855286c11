"""Probes of what the market depends on, asked afresh at each /ready and each scrape: the
database (its last followed block), the chain (Ogmios's tip height), who leads, and the
settler's wallet. Each probe has a time limit and reports an error as text, never raises:
a broken dependency is an answer here, not a failure of the page that asks."""

from __future__ import annotations

import asyncio
import dataclasses
import fcntl
import os
from collections.abc import Awaitable
from pathlib import Path
from typing import TypeVar

from sqlalchemy import Engine, func, text
from sqlmodel import Session, select

from offchain.chain.ogmios import request, utxo_lovelace
from offchain.market.models import ChainPoint
from offchain.market.services.leadership import LOCK_KEY, Background, FileLock
from offchain.market.settings import MarketSettings

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class Observed:
    """One round of probes; a field is None when its probe failed or could not run."""

    database_error: str | None
    followed_height: int | None  # the last block the follower applied (None: none yet)
    chain_error: str | None
    chain_height: int | None
    leading: bool  # this process leads
    leader_elsewhere: bool | None  # another process holds the lock (None: not asked)
    wallet_error: str | None
    wallet_lovelace: int | None  # None also when the market has no wallet

    @property
    def lag_blocks(self) -> int | None:
        if self.chain_height is None or self.followed_height is None:
            return None
        return max(0, self.chain_height - self.followed_height)


async def observe(settings: MarketSettings, engine: Engine, background: Background) -> Observed:
    """Every probe at once, each within `ready_timeout_ms`."""
    limit_s = settings.ready_timeout_ms / 1000
    batcher = background.batcher
    wallet = None if batcher is None else str(batcher.wallet.address)
    leading = background.leading
    database, chain, elsewhere, lovelace = await asyncio.gather(
        _within(limit_s, asyncio.to_thread(_followed_height, engine)),
        _within(limit_s, _tip_height(settings.ogmios_url)),
        _within(limit_s, asyncio.to_thread(_leader_elsewhere, engine, settings)),
        _within(limit_s, _lovelace(settings.ogmios_url, wallet)),
    )  # fmt: skip
    return Observed(
        database_error=database[1], followed_height=database[0],
        chain_error=chain[1], chain_height=chain[0],
        leading=leading, leader_elsewhere=None if leading else elsewhere[0],
        wallet_error=lovelace[1], wallet_lovelace=lovelace[0],
    )  # fmt: skip


async def _within(limit_s: float, probe: Awaitable[T]) -> tuple[T | None, str | None]:
    """The probe's answer and no error, or None and why it failed."""
    try:
        async with asyncio.timeout(limit_s):
            return await probe, None
    except TimeoutError:
        return None, f"no answer within {limit_s:g} s"
    except Exception as exc:
        return None, f"{type(exc).__name__}: {exc}".splitlines()[0]


def _followed_height(engine: Engine) -> int | None:
    """The last block the follower applied: one query that also tells the database answers."""
    with Session(engine) as session:
        return session.exec(select(func.max(ChainPoint.height))).one()


async def _tip_height(url: str) -> int:
    height = await request(url, "queryNetwork/blockHeight")
    return 0 if height == "origin" else int(height)


async def _lovelace(url: str, address: str | None) -> int | None:
    if address is None:
        return None
    return await asyncio.to_thread(utxo_lovelace, url, {"addresses": [address]})


def _leader_elsewhere(engine: Engine, settings: MarketSettings) -> bool:
    """Whether some process holds the leader's lock (asked without taking it for long: a
    shared flock tried and let go at once, or PostgreSQL's lock table)."""
    if engine.dialect.name == "sqlite":
        return _file_locked(FileLock(settings).path)
    high, low = (LOCK_KEY >> 32) & 0xFFFFFFFF, LOCK_KEY & 0xFFFFFFFF
    query = text(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted "
        "AND classid::bigint = :high AND objid::bigint = :low AND objsubid = 1"
    )
    with engine.connect() as connection:
        return bool(connection.execute(query, {"high": high, "low": low}).scalar())


def _file_locked(path: Path) -> bool:
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing lets go of a lock taken
    return False
