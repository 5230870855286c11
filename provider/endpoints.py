"""The provider's book of inference endpoints: each a service it runs for one renter, reached
through its gateway at `/endpoints/<name>/...`, paid by IOUs on that renter's channel.

SQLite in WAL mode beside the channel book (`<state_dir>/daemon/endpoints.sqlite`), so the
daemon starting services and the gateway serving them share it across processes. Its commits
are `synchronous=NORMAL` (no fsync each): the money is the channel book's acknowledged IOU,
stored with `synchronous=FULL`, and every next IOU must reach it whatever `served` says, so a
`served` total that lags after a machine crash costs the provider nothing.
"""

from __future__ import annotations

import dataclasses
import re
import sqlite3
import threading
from pathlib import Path

SCHEMA = """
CREATE TABLE IF NOT EXISTS endpoint (
    name TEXT PRIMARY KEY,          -- the path segment after /endpoints/
    channel BLOB NOT NULL,          -- the renter's channel that pays for it
    upstream TEXT NOT NULL,         -- where the gateway sends its requests: http://HOST:PORT
    price_per_request INTEGER NOT NULL,  -- lovelace
    price_per_second INTEGER NOT NULL,   -- lovelace
    started_ms INTEGER NOT NULL,    -- POSIX ms
    requests INTEGER NOT NULL,      -- requests served so far
    served INTEGER NOT NULL         -- lovelace of service charged so far
)
"""
# A name is one URL path segment, readable in logs: no slash, no percent-encoding needed.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
UPSTREAM = re.compile(r"https?://[^/?#\s]+")


@dataclasses.dataclass(frozen=True)
class Endpoint:
    name: str
    channel: bytes  # the renter's channel id: blake2b_224 of its terms
    upstream: str  # e.g. "http://127.0.0.1:PORT": the service, never reached from outside
    price_per_request: int  # lovelace
    price_per_second: int  # lovelace
    started_ms: int  # POSIX ms
    requests: int = 0
    served: int = 0  # lovelace charged so far

    def __post_init__(self) -> None:
        if not NAME.fullmatch(self.name):
            raise ValueError(f"endpoint name {self.name!r}: letters, digits, '.', '_', '-' "
                             "(a letter or digit first), at most 64")  # fmt: skip
        if not UPSTREAM.fullmatch(self.upstream):
            raise ValueError(f"upstream {self.upstream!r} is not http(s)://HOST[:PORT]")
        if min(self.price_per_request, self.price_per_second, self.requests, self.served) < 0:
            raise ValueError("prices, requests and served lovelace are never negative")


class EndpointBook:
    def __init__(self, path: Path) -> None:
        """The book stored at `path` (made if missing)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA busy_timeout=10000")  # another process's commit in progress
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")  # see the module's docstring
        self._db.execute(SCHEMA)
        self._lock = threading.Lock()  # one connection, used by one thread at a time

    @classmethod
    def in_state_dir(cls, state_dir: Path) -> EndpointBook:
        """The daemon's book: `<state_dir>/daemon/endpoints.sqlite`."""
        return cls(state_dir / "daemon" / "endpoints.sqlite")

    def close(self) -> None:
        self._db.close()

    def add(self, endpoint: Endpoint) -> None:
        """Serve `endpoint`; ValueError if its name is taken."""
        try:
            with self._lock:
                self._db.execute("INSERT INTO endpoint VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                                 dataclasses.astuple(endpoint))  # fmt: skip
        except sqlite3.IntegrityError as error:
            raise ValueError(f"an endpoint named {endpoint.name} exists already") from error

    def get(self, name: str) -> Endpoint | None:
        with self._lock:
            row = self._db.execute("SELECT * FROM endpoint WHERE name = ?", (name,)).fetchone()
        return None if row is None else Endpoint(*row)

    def list(self) -> list[Endpoint]:
        """Every endpoint, by name."""
        with self._lock:
            rows = self._db.execute("SELECT * FROM endpoint ORDER BY name").fetchall()
        return [Endpoint(*row) for row in rows]

    def remove(self, name: str) -> None:
        """Serve `name` no more; nothing happens if it is not here (a stop may be retried)."""
        with self._lock:
            self._db.execute("DELETE FROM endpoint WHERE name = ?", (name,))

    def charge(self, name: str, lovelace: int) -> int:
        """Count one request served on `name` at `lovelace`; the lovelace served in all since.
        KeyError if there is no such endpoint (removed while the request was served)."""
        if lovelace < 0:
            raise ValueError("a charge is never negative")
        with self._lock:
            row = self._db.execute(
                "UPDATE endpoint SET requests = requests + 1, served = served + ? "
                "WHERE name = ? RETURNING served",
                (lovelace, name),
            ).fetchone()
        if row is None:
            raise KeyError(f"no endpoint named {name}")
        return int(row[0])
