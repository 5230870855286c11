"""Migrations run once for a market on several hosts: `unchained market migrate` brings the
database to the newest migration and exits; hosts started with `migrate = false` check that it
is there and refuse to start, naming the command, when it is not; on PostgreSQL markets
migrating at once take turns under an advisory lock (without it, the second's CREATE TABLE
fails on the first's tables); and a pooled connection the server dropped is replaced when it
is checked out, not found dead by a request."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest
from sqlalchemy import NullPool, create_engine, text

from offchain.market.db import check_at_head, make_engine, upgrade
from offchain.market.errors import MarketRefusal
from offchain.market.settings import MarketSettings
from tests.market.processes import MarketProcess

HOSTS = 4


@pytest.fixture
def database_url() -> str:
    """The `settings` fixture's; each test names its own database."""
    return ""


def test_markets_migrating_at_once_take_turns(tmp_path, postgresql_url):
    settings = MarketSettings(data_dir=tmp_path, database_url=postgresql_url)
    failures: list[BaseException] = []

    def host() -> None:
        engine = make_engine(settings)
        try:
            upgrade(engine)
        except BaseException as exc:
            failures.append(exc)
        finally:
            engine.dispose()

    starts = [threading.Thread(target=host) for _ in range(HOSTS)]
    for start in starts:
        start.start()
    for start in starts:
        start.join(timeout=120)
    assert failures == []
    engine = make_engine(settings)
    check_at_head(engine)  # raises unless at the newest migration
    engine.dispose()


def test_market_migrate_runs_once_and_a_host_that_does_not_checks(
    tmp_path, settings, postgresql_url
):
    unmigrated = settings.model_copy(update={"database_url": postgresql_url, "migrate": False})
    refused = MarketProcess(unmigrated, tmp_path / "refused.log")
    with pytest.raises(AssertionError, match="the market exited"):
        refused.start()
    assert "run `unchained market migrate`" in (tmp_path / "refused.log").read_text()

    env = {**os.environ, "UNCHAINED_MARKET_DATABASE_URL": postgresql_url}
    done = subprocess.run(
        [sys.executable, "-m", "unchained.cli", "market", "migrate", "--config",
         str(tmp_path / "none.toml")], env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0 and "newest migration" in done.stdout, done.stderr
    market = MarketProcess(unmigrated, tmp_path / "market.log").start()
    try:
        assert market.health() is not None
    finally:
        market.stop()


def test_a_connection_the_server_dropped_is_replaced_at_checkout(tmp_path, postgresql_url):
    engine = make_engine(MarketSettings(data_dir=tmp_path, database_url=postgresql_url))
    with engine.connect() as connection:  # pooled once returned
        pid = connection.execute(text("SELECT pg_backend_pid()")).scalar_one()
    killer = create_engine(postgresql_url, poolclass=NullPool)  # another client: the operator
    with killer.connect() as connection:
        connection.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
    killer.dispose()
    with engine.connect() as connection:  # the dead one is pinged, dropped, replaced
        assert connection.execute(text("SELECT pg_backend_pid()")).scalar_one() != pid
    engine.dispose()


def test_a_market_at_an_older_migration_names_the_command(tmp_path):
    engine = make_engine(MarketSettings(data_dir=tmp_path))
    with pytest.raises(MarketRefusal, match=r"is at migration none, not .*market migrate"):
        check_at_head(engine)
    engine.dispose()
