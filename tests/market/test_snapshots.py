"""A page reads one snapshot: `db.snapshots` sessions see the database as of their first query,
whatever commits in between, on both databases (the explorer's channel page once read a
channel's row before the follower undid a rolled-back claim and its events after it: one move
shown with the claim's amount). A plain session, its twin, sees the commit: the test sees the
race it guards against."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from sqlalchemy import Engine, func
from sqlmodel import Session, select

from offchain.market.db import sessions, snapshots
from offchain.market.models import ChainBlock
from offchain.market.settings import MarketSettings
from tests.market.database import engine_at_head


@pytest.fixture
def engine(tmp_path, database_url) -> Iterator[Engine]:
    made = engine_at_head(MarketSettings(data_dir=tmp_path, database_url=database_url))
    yield made
    made.dispose()


def blocks(session: Session) -> int:
    return session.exec(select(func.count()).select_from(ChainBlock)).one()


def commit_block(engine: Engine, slot: int) -> None:
    with Session(engine) as writer:
        writer.add(ChainBlock(slot=slot, height=slot, block_id=f"{slot:064x}", tx_count=0,
                              indexed_txs=0))  # fmt: skip
        writer.commit()


@pytest.mark.parametrize(("kind", "sees_the_commit"), [(snapshots, False), (sessions, True)])
def test_a_snapshot_reads_as_of_its_first_query(
    engine: Engine, kind: Callable[[Engine], Iterator[Session]], sees_the_commit: bool
):
    commit_block(engine, 1)
    reader = kind(engine)
    session = next(reader)
    assert blocks(session) == 1
    commit_block(engine, 2)  # between two reads of one page
    assert blocks(session) == (2 if sees_the_commit else 1)
    reader.close()
    assert blocks(next(snapshots(engine))) == 2  # a new page sees it
