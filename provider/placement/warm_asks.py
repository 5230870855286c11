"""How the gateway asks the daemon to scale an endpoint on the fleet: how many replicas it wants
warm (`want`), and the daemon's word when a start for that ask failed (`failed`).

On a single host the gateway's scaler starts and stops replicas on its own engine. On a fleet
the daemon owns the placement (its Ray driver holds the placement groups, its nodes' actors
hold the GPUs, it places a dead node's replicas again and finds them after its restart), so
the gateway only asks: a row per endpoint, SQLite in WAL mode beside the book
(`<state_dir>/daemon/fleet_warm.sqlite`), written by the gateway, read each round by the
daemon's `FleetServices.upstream`, which starts or stops replicas and gives the book their
upstream (`provider.placement.fleet_scaling` is the gateway's side). Each ask has a number
that only grows: a failed start names the ask it served, so the gateway's waiter for that ask
learns of it and the daemon tries again only for a newer ask (the next request's)."""

from __future__ import annotations

import dataclasses
import sqlite3
import threading
from pathlib import Path

SCHEMA = """
CREATE TABLE IF NOT EXISTS warm_ask (
    name TEXT PRIMARY KEY,          -- the book's deployment name
    warm INTEGER NOT NULL,          -- replicas the gateway wants warm
    ask INTEGER NOT NULL,           -- this ask's number: grows by one at each `want`
    failed_ask INTEGER NOT NULL,    -- the last ask a start failed for (0: none)
    failed TEXT NOT NULL            -- why it failed
)
"""


@dataclasses.dataclass(frozen=True)
class WarmAsk:
    warm: int
    ask: int
    failed_ask: int = 0
    failed: str = ""

    @property
    def may_start(self) -> bool:
        """Whether the daemon starts replicas for it: not after a start for it failed."""
        return self.ask > self.failed_ask


class WarmAsks:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA busy_timeout=10000")  # the other process's commit
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(SCHEMA)
        self._lock = threading.Lock()

    @classmethod
    def in_state_dir(cls, state_dir: Path) -> WarmAsks:
        return cls(state_dir / "daemon" / "fleet_warm.sqlite")

    def close(self) -> None:
        self._db.close()

    def want(self, name: str, warm: int) -> int:
        """The gateway wants `warm` replicas of `name` warm: this ask's number."""
        with self._lock:
            row = self._db.execute(
                "INSERT INTO warm_ask VALUES (?, ?, 1, 0, '') ON CONFLICT (name) DO UPDATE SET "
                "warm = excluded.warm, ask = ask + 1 RETURNING ask",
                (name, warm),
            ).fetchone()
        return int(row[0])

    def get(self, name: str) -> WarmAsk | None:
        """`name`'s last ask (None: never asked: all its replicas run)."""
        with self._lock:
            row = self._db.execute(
                "SELECT warm, ask, failed_ask, failed FROM warm_ask WHERE name = ?", (name,)
            ).fetchone()
        return None if row is None else WarmAsk(*row)

    def failed(self, name: str, ask: int, reason: str) -> None:
        """A start for ask `ask` of `name` failed, for `reason` (an endpoint never asked
        about keeps no row: its replicas are tried again each round, as any rental's)."""
        with self._lock:
            self._db.execute(
                "UPDATE warm_ask SET failed_ask = ?, failed = ? WHERE name = ? AND failed_ask < ?",
                (ask, reason, name, ask),
            )

    def forget(self, name: str) -> None:
        """`name` started anew or stopped: its asks go."""
        with self._lock:
            self._db.execute("DELETE FROM warm_ask WHERE name = ?", (name,))
