"""The provider's book of payment channels (contracts/PROTOCOL.md, channels): the channels it
agreed to serve, what the chain last showed of each, and the latest IOU each renter signed.

`accept` checks an IOU (signature by the channel's renter key for this deployment's network and
channel script, not below the last one acknowledged, within what the channel can pay) and
stores it before it returns: SQLite in WAL mode with `synchronous=FULL`, so an acknowledged IOU
outlives a crash of the process and of the machine. `may_serve` is the credit rule: serve while
what was served is covered by acknowledged IOUs within `credit` lovelace. The book reads no
chain: the daemon's claim schedule (`provider.daemon.channel_claims`) tells it what the chain
shows (`seen`) and claims what it holds. Every call reads the database, so a gateway and the
daemon in other processes share one book.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pycardano import ScriptHash

from offchain.chain.follower import Point
from offchain.core.errors import UnchainedError
from offchain.protocol.ledger.iou import SignedIou
from offchain.protocol.tx.channel import OPEN
from provider import metrics as provider_metrics

SCHEMA = """
CREATE TABLE IF NOT EXISTS channel (
    id BLOB PRIMARY KEY,            -- blake2b_224 of the channel's terms
    utxo TEXT NOT NULL,             -- TXID#IX of its output when the chain last showed it
    address TEXT NOT NULL,          -- the channel's full address (bech32)
    renter_vkey BLOB NOT NULL,      -- signs its IOUs
    claimed INTEGER NOT NULL,       -- lovelace claimed on chain so far
    capacity INTEGER NOT NULL,      -- the most an IOU may be: claimed + lovelace above min-UTxO
    closing_at INTEGER NOT NULL,    -- -1 open, else POSIX ms from which the renter drains
    ended INTEGER NOT NULL DEFAULT 0,   -- 1: the chain holds it no more
    iou_amount INTEGER NOT NULL DEFAULT 0,  -- the latest IOU acknowledged (0: none)
    iou_signature BLOB              -- its signature; NULL while there is none
)
"""
# Each schema change after the first table, in order; PRAGMA user_version counts those applied,
# so a book made by an older daemon is brought up to date when opened.
MIGRATIONS = (
    # a chain point ({slot, id} as JSON) at which `utxo` was unspent: where the search for the
    # transaction that spent it starts. NULL: unknown (the search starts at the chain's origin)
    "ALTER TABLE channel ADD COLUMN unspent_at TEXT",
    # chain points (newest first, JSON) at which the claim schedule saw the channel's output
    # unspent at successive rounds, thinned by the daemon: searches start at the newest still
    # on chain after a fork, `unspent_at` behind them
    "ALTER TABLE channel ADD COLUMN resume_points TEXT NOT NULL DEFAULT '[]'",
    # the outputs (TXID#IX, JSON, newest first) the channel was at before `utxo`: where the
    # book goes back to when a fork undoes the transaction that made `utxo` (a claim)
    "ALTER TABLE channel ADD COLUMN earlier TEXT NOT NULL DEFAULT '[]'",
)
EARLIER_MAX = 16  # outputs kept behind the current one


class IouRefused(UnchainedError, ValueError):
    """An IOU the provider does not take; the message says why (the gateway answers it)."""


class UnknownChannel(IouRefused):
    """No channel of that id is in the book (never opened here, or ended)."""


class BadIouSignature(IouRefused):
    """Not signed by the channel's renter key for this network and channel script."""


class StaleIou(IouRefused):
    """Below the latest IOU acknowledged on that channel: IOUs are cumulative."""


class IouAboveChannel(IouRefused):
    """More than the channel can pay: claimed so far plus its lovelace above the min-UTxO."""


@dataclasses.dataclass(frozen=True)
class ChannelView:
    """A channel as the chain shows it now, in the book's terms."""

    id: bytes
    utxo: str  # TXID#IX
    address: str
    renter_vkey: bytes
    claimed: int
    capacity: int  # claimed + the lovelace it holds above the min-UTxO its output keeps
    closing_at: int  # OPEN, or POSIX ms


@dataclasses.dataclass(frozen=True)
class BookEntry:
    """A channel in the book: the chain's last view, the latest IOU acknowledged, and a chain
    point at which the view's output was unspent (None: unknown)."""

    view: ChannelView
    ended: bool
    iou: SignedIou | None
    unspent_at: Point | None
    resume_points: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # newest first
    earlier: list[str] = dataclasses.field(default_factory=list)  # outputs before, newest first

    @property
    def search_from(self) -> list[Point]:
        """Where the search for the spend of the view's output may start, newest first."""
        return [*self.resume_points, *([self.unspent_at] if self.unspent_at else [])]

    @property
    def unclaimed(self) -> int:
        """Lovelace its latest IOU holds beyond what the chain has paid out already."""
        return self.iou.amount - self.view.claimed if self.iou else 0


class ChannelBook:
    def __init__(self, path: Path, network_id: int, channel_hash: ScriptHash, credit: int) -> None:
        """The book stored at `path` (made if missing), for IOUs of `network_id` and the
        channel script `channel_hash`; `credit`: lovelace served ahead of acknowledged IOUs."""
        if credit < 0:
            raise ValueError("the credit is never negative")
        self.network_id = network_id
        self.channel_hash = channel_hash
        self.credit = credit
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA busy_timeout=10000")  # another process's commit in progress
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")  # a commit is on disk when it returns
        self._lock = threading.Lock()  # one connection, used by one thread at a time
        with self._write() as db:  # one process migrates; another waits, then finds it done
            db.execute(SCHEMA)
            version = db.execute("PRAGMA user_version").fetchone()[0]
            for step in MIGRATIONS[version:]:
                db.execute(step)
            db.execute(f"PRAGMA user_version = {len(MIGRATIONS)}")

    @classmethod
    def in_state_dir(
        cls, state_dir: Path, network_id: int, channel_hash: ScriptHash, credit: int
    ) -> ChannelBook:
        """The daemon's book: `<state_dir>/daemon/channels.sqlite`."""
        return cls(state_dir / "daemon" / "channels.sqlite", network_id, channel_hash, credit)

    def close(self) -> None:
        self._db.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One transaction that takes the write lock first (reads in it see the latest)."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def open(self, view: ChannelView, unspent_at: Point) -> None:
        """Register a channel the provider agreed to serve (after `check_channel` passed),
        its output unspent at chain point `unspent_at`. Opening one already in the book only
        refreshes what the chain shows of it."""
        with self._write() as db:
            db.execute("INSERT INTO channel (id, utxo, address, renter_vkey, claimed, capacity, "
                       "closing_at, unspent_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
                       "ON CONFLICT (id) DO UPDATE SET utxo = excluded.utxo, "
                       "claimed = excluded.claimed, capacity = excluded.capacity, "
                       "closing_at = excluded.closing_at, unspent_at = excluded.unspent_at",
                       (*dataclasses.astuple(view), json.dumps(unspent_at)))  # fmt: skip

    def seen(
        self, view: ChannelView, unspent_at: Point | None = None,
        resume_points: Sequence[dict[str, Any]] | None = None,
    ) -> None:  # fmt: skip
        """What the chain shows of a channel now: its output, claimed amount (a claim seen on
        chain), capacity (a top-up) and close; `unspent_at`, a chain point at which that
        output was unspent, and `resume_points`, the points to search from first. None keeps
        the last ones: a point from before the output was made still starts a search for its
        spend rightly (as for a claim the daemon submitted)."""
        points = None if resume_points is None else json.dumps(resume_points)
        with self._write() as db:
            row = db.execute("SELECT utxo, earlier FROM channel WHERE id = ?", (view.id,))
            (utxo, earlier), moved = row.fetchone(), []
            if utxo != view.utxo:  # a new output: the one before is kept, for a fork
                moved = [utxo, *json.loads(earlier)][:EARLIER_MAX]
            db.execute(
                "UPDATE channel SET utxo = ?, claimed = ?, capacity = ?, closing_at = ?, "
                "unspent_at = COALESCE(?, unspent_at), "
                "resume_points = COALESCE(?, resume_points), earlier = ? WHERE id = ?",
                (view.utxo, view.claimed, view.capacity, view.closing_at,
                 None if unspent_at is None else json.dumps(unspent_at), points,
                 json.dumps(moved) if moved else earlier, view.id),
            )  # fmt: skip

    def back(self, channel_id: bytes) -> str:
        """A fork undid the transaction that made the channel's output: the book goes back
        to the output before it (what the chain shows of it is read again); that output."""
        with self._write() as db:
            row = db.execute("SELECT earlier FROM channel WHERE id = ?", (channel_id,))
            previous, *rest = json.loads(row.fetchone()[0])
            db.execute("UPDATE channel SET utxo = ?, earlier = ? WHERE id = ?",
                       (previous, json.dumps(rest), channel_id))  # fmt: skip
        return str(previous)

    def ended(self, channel_id: bytes) -> None:
        """The chain holds the channel no more (drained, ended or closed by both)."""
        with self._write() as db:
            db.execute("UPDATE channel SET ended = 1 WHERE id = ?", (channel_id,))

    def accept(self, iou: SignedIou) -> None:
        """Take `iou` and store it durably before returning; IouRefused says why not."""
        (refusal,) = self.accept_many([iou])
        if refusal is not None:
            raise refusal

    def accept_many(self, ious: Sequence[SignedIou]) -> list[IouRefused | None]:
        """`accept` each of `ious` in turn, all stored in one transaction (one flush to disk,
        the group commit's): each one's refusal, None where it was taken."""
        refusals: list[IouRefused | None] = [self._refusal(iou) for iou in ious]
        if all(refusal is not None for refusal in refusals):
            provider_metrics.IOUS.labels("refused").inc(len(ious))
            return refusals
        with self._write() as db:
            for index, iou in enumerate(ious):
                if refusals[index] is not None:
                    continue
                latest, capacity = db.execute(
                    "SELECT iou_amount, capacity FROM channel WHERE id = ?", (iou.channel,)
                ).fetchone()
                if iou.amount < latest:
                    refusals[index] = StaleIou(f"IOU of {iou.amount} lovelace is below the "
                                               f"{latest} already acknowledged on channel "
                                               f"{iou.channel.hex()}")  # fmt: skip
                elif iou.amount > capacity:
                    refusals[index] = IouAboveChannel(f"IOU of {iou.amount} lovelace is above "
                                                      f"the {capacity} channel "
                                                      f"{iou.channel.hex()} can pay")  # fmt: skip
                else:
                    db.execute("UPDATE channel SET iou_amount = ?, iou_signature = ? WHERE id = ?",
                               (iou.amount, iou.signature, iou.channel))  # fmt: skip
        refused = sum(refusal is not None for refusal in refusals)
        provider_metrics.IOUS.labels("refused").inc(refused)
        provider_metrics.IOUS.labels("accepted").inc(len(ious) - refused)
        return refusals

    def _refusal(self, iou: SignedIou) -> IouRefused | None:
        """Why `iou` is refused before the book's latest IOU and capacity are looked at: an
        unknown or ended channel, a bad signature (None: neither)."""
        entry = self.get(iou.channel)
        if entry is None or entry.ended:
            return UnknownChannel(f"channel {iou.channel.hex()} is not served here")
        if not iou.signed_by(entry.view.renter_vkey, self.network_id, self.channel_hash):
            return BadIouSignature(
                f"IOU on channel {iou.channel.hex()} not signed by its renter for network "
                f"{self.network_id} and channel script {self.channel_hash.payload.hex()}"
            )
        return None

    def may_serve(self, channel_id: bytes, served: int) -> bool:
        """Whether the provider may go on serving `channel_id` having served `served` lovelace
        of work on it in all: the channel is open (a close started ends the service), can pay
        that much, and its acknowledged IOUs lag it by at most the credit."""
        entry = self.get(channel_id)
        if entry is None or entry.ended or entry.view.closing_at != OPEN:
            return False
        acknowledged = entry.iou.amount if entry.iou else 0
        return served <= entry.view.capacity and served - acknowledged <= self.credit

    def get(self, channel_id: bytes) -> BookEntry | None:
        with self._lock:
            row = self._db.execute("SELECT * FROM channel WHERE id = ?", (channel_id,)).fetchone()
        return None if row is None else _entry(row)

    def live(self) -> list[BookEntry]:
        """The channels the chain still holds, oldest first: what the claim schedule watches."""
        return self._select("WHERE ended = 0")

    def entries(self) -> list[BookEntry]:
        """Every channel ever admitted, oldest first."""
        return self._select("")

    def _select(self, where: str) -> list[BookEntry]:
        with self._lock:
            rows = self._db.execute(f"SELECT * FROM channel {where} ORDER BY rowid").fetchall()
        return [_entry(row) for row in rows]


def _entry(row: Any) -> BookEntry:
    *chain, ended, amount, signature, unspent_at, resume_points, earlier = row
    view = ChannelView(*chain)
    iou = None if signature is None else SignedIou(view.id, amount, signature)
    point = None if unspent_at is None else json.loads(unspent_at)
    return BookEntry(view, bool(ended), iou, point, json.loads(resume_points), json.loads(earlier))
