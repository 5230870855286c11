"""The database: one engine per process, sessions per request, and the schema brought to
Alembic's head at start (SQLite file by default, PostgreSQL through `database_url`)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TypeVar

import psycopg
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from psycopg.errors import ReadOnlySqlTransaction
from sqlalchemy import Engine, event, text
from sqlalchemy.engine.interfaces import DBAPIConnection
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import ConnectionPoolEntry
from sqlmodel import Session, SQLModel, create_engine

from offchain.market.errors import MarketRefusal, NotFound
from offchain.market.settings import MarketSettings

MIGRATIONS = Path(__file__).parent / "migrations"
# Connections per process; the API's thread pool is sized to match (`app.py`), so a request
# thread never waits for a connection while holding a slot of the pool.
POOL_SIZE = 16
RECYCLE_S = 1800  # a PostgreSQL connection is replaced after this long
# One key for every market process: the migrations run under this PostgreSQL advisory lock
MIGRATION_LOCK = 0x756E636861696E  # "unchain"
_WRITERS: dict[str, _Writers] = {}
_WRITERS_GUARD = threading.Lock()
Row = TypeVar("Row", bound=SQLModel)


def make_engine(settings: MarketSettings) -> Engine:
    """An engine for the settings' database; SQLite waits for a lock rather than failing.

    SQLite runs in WAL mode with synchronous=NORMAL: a commit no longer waits for an fsync
    (about 5 ms each, two per signed request, every writer queued behind it); a killed process
    loses nothing, a power cut may lose the last commits but never corrupts the file."""
    url = settings.sqlalchemy_url
    if not url.startswith("sqlite"):
        # pre-ping: a connection the server dropped (a restart, a failover) is replaced when
        # it is checked out, not found dead by the request that uses it
        return create_engine(
            url, pool_size=POOL_SIZE, max_overflow=POOL_SIZE, pool_recycle=RECYCLE_S,
            pool_pre_ping=True,
        )  # fmt: skip
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    engine = create_engine(
        url, connect_args={"check_same_thread": False, "timeout": 30},
        pool_size=POOL_SIZE, max_overflow=POOL_SIZE,
    )  # fmt: skip

    @event.listens_for(engine, "connect")
    def _pragmas(connection: DBAPIConnection, _record: ConnectionPoolEntry) -> None:
        cursor = connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    return engine


def unreachable(exc: DBAPIError) -> bool:
    """Whether `exc` says the database cannot be used now rather than that the request or the
    code is wrong: a dropped connection, PostgreSQL's operational errors (no connection, the
    server shutting down or failing over, out of connections) or a session that cannot write
    (a standby reached where the primary was). The API answers these 503, to be tried again,
    never 500. SQLite's OperationalError is left out: it also means a missing table or a
    syntax error, a bug to show as one."""
    return exc.connection_invalidated or isinstance(
        exc.orig, (psycopg.OperationalError, ReadOnlySqlTransaction)
    )


class _Writers:
    """One SQLite file's writers: the threads of this process take turns on a lock, and the
    processes (`serve --workers N`) on an exclusive `flock` of a file beside the database.
    Both queue a writer without sleeping, where SQLite's busy handler sleeps up to 100 ms per
    try while the file is locked (the seconds-long tail of a signed request under load)."""

    def __init__(self, database: str | None) -> None:
        self.threads = threading.Lock()
        in_memory = not database or database == ":memory:"
        self.path = None if in_memory else f"{database}.writers"

    @contextlib.contextmanager
    def turn(self) -> Iterator[None]:
        with self.threads:
            if self.path is None:
                yield
                return
            # opened per turn (a few microseconds): no descriptor held per database for life
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)  # releases the flock


@contextlib.contextmanager
def writing(engine: Engine) -> Iterator[None]:
    """Held around an API write transaction: on SQLite, writers take turns (`_Writers`);
    PostgreSQL locks rows itself: nothing to hold."""
    if engine.dialect.name != "sqlite":
        yield
        return
    key = str(engine.url)
    with _WRITERS_GUARD:
        writers = _WRITERS.get(key)
        if writers is None:
            writers = _WRITERS[key] = _Writers(engine.url.database)
    with writers.turn():
        yield


def alembic_config(engine: Engine) -> Config:
    """Alembic's config pointing at our migrations, run on `engine` (no alembic.ini to find)."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["engine"] = engine
    return config


def upgrade(engine: Engine) -> None:
    """Bring the schema to the newest migration (a no-op when it is there). On PostgreSQL
    under an advisory lock: markets on several hosts starting at once migrate one at a time,
    the later ones finding the schema at head."""
    if engine.dialect.name != "postgresql":
        command.upgrade(alembic_config(engine), "head")  # one file, one host
        return
    with engine.connect() as holder:
        holder.execute(text("SELECT pg_advisory_lock(:key)"), {"key": MIGRATION_LOCK})
        try:
            command.upgrade(alembic_config(engine), "head")
        finally:
            holder.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": MIGRATION_LOCK})


def check_at_head(engine: Engine) -> None:
    """MarketRefusal unless the database is at the newest migration (a market started with
    `migrate = false` before `unchained market migrate` ran, or after a newer version's)."""
    with engine.connect() as connection:
        current = MigrationContext.configure(connection).get_current_heads()
    newest = ScriptDirectory.from_config(alembic_config(engine)).get_heads()
    if set(current) != set(newest):
        raise MarketRefusal(
            f"the database is at migration {', '.join(current) or 'none'}, not "
            f"{', '.join(newest)}: run `unchained market migrate` (or set migrate = true)"
        )


def sessions(engine: Engine) -> Iterator[Session]:
    """One session per unit of work; whatever it did not commit is rolled back."""
    with Session(engine, expire_on_commit=False) as session:
        yield session


def snapshots(engine: Engine) -> Iterator[Session]:
    """A session for reading only, whose every query sees the database as of its first: a page
    that reads a row and then its events never shows one from before a commit and the other
    from after it (the follower undoing a rolled-back block, say). SQLite: an explicit BEGIN
    (its driver starts none for a read, so each SELECT would see the newest commit);
    PostgreSQL: REPEATABLE READ (READ COMMITTED gives each statement a snapshot of its own)."""
    with Session(engine, expire_on_commit=False) as session:
        if engine.dialect.name == "sqlite":
            session.execute(text("BEGIN"))
        else:
            session.connection(execution_options={"isolation_level": "REPEATABLE READ"})
        yield session


def found(session: Session, model: type[Row], key: str, missing: str, field: str) -> Row:
    """The `model` row keyed `key`; NotFound saying `missing`, naming `field`, when none is."""
    row = session.get(model, key)
    if row is None:
        raise NotFound(missing, field)
    return row
