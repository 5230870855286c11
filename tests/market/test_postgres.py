"""The throwaway PostgreSQL the market's tests run on: SQLAlchemy reaches it, it runs as a
non-root user, each test gets its own database, and a session-level advisory lock is held by one
connection at a time and freed when its holder goes (what leader election stands on); a
primary's synchronous standby has every commit and, promoted, takes the writes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from sqlalchemy import NullPool, create_engine, text

from offchain.market.settings import MarketSettings
from tests.market.postgres import server_bin
from tests.market.replication import ReplicatedPair

LEADER_LOCK = 0x756E6368  # any 64-bit key the contenders agree on


@pytest.fixture
def engine(postgresql_url):
    """No pool: closing a connection ends its server session, as a dead process's would."""
    engine = create_engine(postgresql_url, poolclass=NullPool)
    yield engine
    engine.dispose()


def test_sqlalchemy_connects_and_keeps_bigints(engine):
    with engine.begin() as connection:
        connection.execute(text("CREATE TABLE t (lovelace BIGINT NOT NULL)"))
        connection.execute(text("INSERT INTO t VALUES (:v)"), {"v": 45_000_000_000_000_000})
        assert connection.execute(text("SELECT lovelace FROM t")).scalar_one() == 45 * 10**15
        assert connection.execute(text("SELECT current_user")).scalar_one() == "postgres"


def test_the_server_runs_as_a_non_root_user(engine, postgresql_cluster):
    with engine.connect() as connection:
        data_dir = connection.execute(text("SHOW data_directory")).scalar_one()
    assert Path(data_dir) == postgresql_cluster.data
    if os.geteuid() == 0:
        assert Path(data_dir).stat().st_uid != 0


def test_each_test_gets_an_empty_database_of_its_own(postgresql_cluster, postgresql_url):
    other = create_engine(postgresql_cluster.new_database())
    try:
        with other.begin() as connection:
            connection.execute(text("CREATE TABLE mine (x INT)"))
        with create_engine(postgresql_url).connect() as connection:
            tables = "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"
            assert connection.execute(text(tables)).scalar_one() == 0
    finally:
        other.dispose()


def test_an_advisory_lock_is_held_by_one_connection_until_it_goes(engine):
    take = text("SELECT pg_try_advisory_lock(:key)").bindparams(key=LEADER_LOCK)
    leader, follower = engine.connect(), engine.connect()
    try:
        assert leader.execute(take).scalar_one() is True
        assert follower.execute(take).scalar_one() is False
        assert leader.execute(take).scalar_one() is True  # re-entrant for its holder
        leader.close()  # the leader's session ends (a crash ends it the same way)
        leader = None
        assert follower.execute(take).scalar_one() is True
    finally:
        for connection in (leader, follower):
            if connection is not None:
                connection.close()


@pytest.mark.postgres
def test_a_standby_has_every_commit_and_once_promoted_takes_writes():
    """The failover test's pair (tests/market/replication.py): a row committed on the primary
    is on the standby when the primary dies; promoted, the standby takes writes through the
    same multi-host URL (it waits for no standby of its own)."""
    bin_dir = server_bin()
    assert bin_dir is not None
    pair = ReplicatedPair(bin_dir).start()
    try:
        url = pair.new_database()
        engine = create_engine(MarketSettings(database_url=url).sqlalchemy_url, poolclass=NullPool)
        with engine.begin() as connection:
            connection.execute(text("CREATE TABLE t (lovelace BIGINT NOT NULL)"))
            connection.execute(text("INSERT INTO t VALUES (1)"))
        pair.stop_primary()
        pair.promote()
        with engine.begin() as connection:
            connection.execute(text("INSERT INTO t VALUES (2)"))
            port = connection.execute(text("SELECT current_setting('port')")).scalar_one()
            rows = connection.execute(text("SELECT lovelace FROM t ORDER BY 1")).scalars().all()
        engine.dispose()
        assert (int(port), rows) == (pair.standby.port, [1, 2])
    finally:
        pair.stop()
