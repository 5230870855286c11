"""A fresh market database at Alembic's head, for the tests that read and write one but do not
test the migrations (tests/market/test_schema.py does): a SQLite file is copied from one
migrated once per process, a millisecond where running the migrations takes half a second a
database, and seeded once where the seed is always the same; PostgreSQL's is migrated and
seeded in place."""

from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from sqlalchemy.engine import Engine, make_url
from sqlmodel import Session

from offchain.market.db import make_engine, upgrade
from offchain.market.settings import MarketSettings

Seed = Callable[[Session], None]  # adds rows to a new database and commits them


def sqlite_file(settings: MarketSettings) -> Path:
    """The SQLite file the settings' engine opens."""
    return Path(make_url(settings.sqlalchemy_url).database or "")


@functools.cache
def _sqlite_at_head(seed: Seed | None) -> Path:
    """A SQLite database brought to Alembic's head by the migrations themselves, then seeded."""
    folder = Path(tempfile.mkdtemp(prefix="unchained-market-at-head-"))
    atexit.register(shutil.rmtree, folder, True)
    settings = MarketSettings(data_dir=folder)
    engine = _migrated(settings, seed)
    engine.dispose()  # the last connection closed: the write-ahead log is in the file
    return sqlite_file(settings)


def _migrated(settings: MarketSettings, seed: Seed | None) -> Engine:
    engine = make_engine(settings)
    upgrade(engine)
    if seed is not None:
        with Session(engine) as session:
            seed(session)
    return engine


def engine_at_head(settings: MarketSettings, seed: Seed | None = None) -> Engine:
    """An engine over the settings' new database at Alembic's head, holding what `seed` adds
    (a seed that reads no clock: on SQLite it runs once per process, into the copied file)."""
    if settings.database_url:
        return _migrated(settings, seed)
    target = sqlite_file(settings)
    assert not target.exists(), f"{target} exists: only a new database is made"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(_sqlite_at_head(seed), target)
    return make_engine(settings)


def served_at_head(settings: MarketSettings) -> MarketSettings:
    """The settings, their new SQLite database copied at head first: a market served on them
    then finds nothing to migrate at startup (half a second a test). Its startup migration of
    a fresh database stays tested where the market runs as a process (test_crash,
    test_leadership) and on PostgreSQL, which is left empty here."""
    if not settings.database_url:
        engine_at_head(settings).dispose()
    return settings
