"""What keeps a signed job request cheap (bench/market.py measures it): SQLite commits without
an fsync each, its writers queued on a lock rather than in SQLite's busy handler, the chain's
time conversion asked for once a minute rather than twice per quote, and a search's per-term
counts made only when someone reads them."""

from __future__ import annotations

import dataclasses
import fcntl
import os
from collections.abc import Iterator

import pytest
from sqlalchemy import text

from offchain.chain.time import ChainTime, Era
from offchain.market.db import make_engine, writing
from offchain.market.offer_query import OfferQuery, OfferRecord
from offchain.market.services.chain import Chain
from offchain.market.settings import MarketSettings


def test_sqlite_runs_in_wal_mode_without_an_fsync_per_commit(tmp_path):
    engine = make_engine(MarketSettings(data_dir=tmp_path))
    try:
        with engine.connect() as connection:
            assert connection.execute(text("PRAGMA journal_mode")).scalar() == "wal"
            assert connection.execute(text("PRAGMA synchronous")).scalar() == 1  # NORMAL
            assert connection.execute(text("PRAGMA foreign_keys")).scalar() == 1
    finally:
        engine.dispose()


@dataclasses.dataclass
class Tip:
    """A context whose tip the test moves; it counts the times its chain time is asked for."""

    last_block_slot: int
    asked: list[int] = dataclasses.field(default_factory=list)
    horizons: Iterator[int] = dataclasses.field(default_factory=lambda: iter([100, 1000]))

    def chain_time(self) -> ChainTime:
        self.asked.append(self.last_block_slot)
        return ChainTime(5_000, (Era(0, 0, next(self.horizons), 200),))


def test_the_chain_time_is_asked_for_once_until_the_tip_passes_its_horizon():
    context = Tip(10)
    asked = context.asked
    chain = Chain(context, None)  # type: ignore[arg-type]
    assert [chain.now_ms() for _ in range(3)] == [5_000 + 10 * 200] * 3
    context.last_block_slot = 50
    assert chain.now_ms() == 5_000 + 50 * 200
    assert len(asked) == 1
    context.last_block_slot = 150  # past the first answer's horizon: asked again
    assert chain.now_ms() == 5_000 + 150 * 200
    assert len(asked) == 2


def test_a_quote_reuses_a_recent_tip_read_and_a_plain_read_never_does():
    context = Tip(10)
    chain = Chain(context, None)  # type: ignore[arg-type]
    assert chain.now_ms(max_age_s=3600) == 5_000 + 10 * 200
    context.last_block_slot = 20
    assert chain.now_ms(max_age_s=3600) == 5_000 + 10 * 200  # read within the hour: reused
    assert chain.now_ms() == 5_000 + 20 * 200  # no age given: the tip is read
    context.last_block_slot = 30
    assert chain.now_ms(max_age_s=0.0) == 5_000 + 30 * 200


def test_the_per_term_counts_are_made_when_read_and_still_right():
    offers = [
        OfferRecord(str(i), "NVIDIA H100", 1, 80 * 1024, 8 * i, 65536, 100_000, 100 + i)
        for i in range(4)
    ]
    query = OfferQuery.parse("cpu>=16 price<=102lovelace")
    found = query.search(offers)
    assert "alone" not in vars(found)  # nothing counted yet
    assert [o.provider_id for o in found.offers] == ["2"]
    assert found.alone == (("cpu>=16", 2), ("price<=102lovelace", 3))


@pytest.mark.parametrize("query", ["gpus>=2", "cpu>=1"])
def test_a_search_still_compares_by_what_it_found(query):
    offers = [OfferRecord("p", "NVIDIA H100", 1, 1024, 8, 65536, 100_000, 100)]
    assert OfferQuery.parse(query).search(offers) == OfferQuery.parse(query).search(offers)


def test_sqlite_writers_of_every_process_take_turns_on_one_flock(tmp_path):
    engine = make_engine(MarketSettings(data_dir=tmp_path))
    lock_file = f"{engine.url.database}.writers"

    def another_process_could_write() -> bool:
        fd = os.open(lock_file, os.O_RDWR | os.O_CREAT)  # its own open file: as a process's
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False
        finally:
            os.close(fd)

    try:
        with writing(engine):
            assert not another_process_could_write()
        assert another_process_could_write()
    finally:
        engine.dispose()
