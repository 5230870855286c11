"""The devnet's data directory: genesis, blocks and clock settings in one SQLite file.

Only blocks are stored; the ledger state is rebuilt by replaying them at start-up, so the
state on disk can never disagree with the chain.
"""

from __future__ import annotations

import dataclasses
import sqlite3
from pathlib import Path

import cbor2

from devnet.genesis import Genesis


@dataclasses.dataclass(frozen=True)
class StoredBlock:
    height: int
    slot: int
    id: bytes
    ancestor: bytes | None  # None for the first block (its ancestor is the genesis)
    txs: list[bytes]  # transaction CBOR, in block order

    @property
    def size(self) -> int:
        return sum(len(tx) for tx in self.txs)


class ChainStore:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.executescript(
            """
            CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
            CREATE TABLE IF NOT EXISTS blocks (
                height INTEGER PRIMARY KEY, slot INTEGER NOT NULL UNIQUE,
                id BLOB NOT NULL UNIQUE, ancestor BLOB, txs BLOB NOT NULL);
            """
        )

    def close(self) -> None:
        self.db.close()

    def genesis(self) -> Genesis | None:
        text = self.get_meta("genesis")
        return Genesis.from_json(text) if text else None

    def set_genesis(self, genesis: Genesis) -> None:
        self.set_meta("genesis", genesis.to_json())

    def get_meta(self, key: str) -> str | None:
        row = self.db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def set_meta(self, key: str, value: str) -> None:
        self.db.execute(
            "INSERT INTO meta(key, value) VALUES(?, ?) "
            "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            (key, value),
        )

    def append(self, block: StoredBlock) -> None:
        self.db.execute(
            "INSERT INTO blocks(height, slot, id, ancestor, txs) VALUES(?, ?, ?, ?, ?)",
            (block.height, block.slot, block.id, block.ancestor, cbor2.dumps(block.txs)),
        )

    def truncate_above(self, height: int) -> None:
        self.db.execute("DELETE FROM blocks WHERE height > ?", (height,))

    def blocks(self) -> list[StoredBlock]:
        rows = self.db.execute(
            "SELECT height, slot, id, ancestor, txs FROM blocks ORDER BY height"
        ).fetchall()
        return [StoredBlock(h, s, i, a, cbor2.loads(t)) for h, s, i, a, t in rows]

    def wipe(self) -> None:
        self.db.execute("DELETE FROM blocks")
        self.db.execute("DELETE FROM meta")
