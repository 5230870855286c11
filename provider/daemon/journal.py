"""The daemon's record of every job it signed for, one JSON file per job, written before each
step it records is taken: after a crash the daemon knows what it accepted, what it still has
to deliver and which receipts it may have to settle itself. The status command reads it too.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_serializer, field_validator

from offchain.chain.utxo import parse_out_ref
from offchain.protocol.job.jobspec import JobSpec
from offchain.protocol.job.outcome import Outcome
from offchain.protocol.job.receipt import Receipt

Stage = Literal[
    "accepted", "running", "finished", "delivered", "settled", "refunded", "failed", "cancelled"
]  # cancelled: its renter's Cancel signed before the job was taken
OPEN: tuple[Stage, ...] = ("accepted", "running", "finished", "delivered")


class JobEntry(BaseModel):
    """One job this provider accepted (or is about to), and how far it got."""

    model_config = ConfigDict(arbitrary_types_allowed=True)  # the Receipt

    job_id: str  # the market's id, also the runner's
    escrow: str  # TXID#IX
    spec: JobSpec
    price_per_unit: int
    gpu_uuids: list[str]
    slot: int
    close_ms: int  # deadline + settle window: the receipt must settle before it
    stage: Stage = "accepted"
    accepted_at_ms: int  # chain time
    started_at_ms: int | None = None  # chain time, when the container was started
    uploaded: bool = False  # the result archive reached the market
    receipt: Receipt | None = None  # as signed: with the escrow on chain, enough to settle it
    outcome: Outcome | None = None  # how the run ended, handed in with the receipt (not signed)
    exit_code: int | None = None  # the program's, handed in with the receipt (not signed)
    receipt_sent: bool = False  # the market has the receipt
    unspent_at: dict[str, Any] | None = None  # a chain point where the escrow was unspent
    # blocks ({slot, id, height}) where the payout watcher saw the escrow unspent, newest
    # first, thinned (`resume.with_point`): where the search for its spend starts after a fork
    resume_points: list[dict[str, Any]] = []
    settle_tx: str | None = None  # the transaction that spent the escrow, once it is spent
    settled_lovelace: int | None = None  # what that transaction paid this provider (settle)
    spent_in: dict[str, Any] | None = None  # the block holding settle_tx, while not final
    final: bool = False  # settle_tx is `finality_blocks` deep: the results are gone
    reason: str | None = None  # why it failed
    registry_account: str | None = None  # the renter's, sealed to this provider's key

    @property
    def earned(self) -> int:
        """Lovelace the receipt claims for this provider (0 without one); what a settlement
        really paid is `settled_lovelace`."""
        return self.receipt.units * self.price_per_unit if self.receipt else 0

    @property
    def search_from(self) -> list[dict[str, Any]]:
        """Where the search for the escrow's spend may start, newest first: the points the
        payout watcher saw it unspent at, then the tip at acceptance."""
        return self.resume_points + ([self.unspent_at] if self.unspent_at else [])

    @field_validator("receipt", mode="before")
    @classmethod
    def _read_receipt(cls, receipt: Any, info: ValidationInfo) -> Any:
        """The journal keeps a receipt's body: the entry's escrow names the rest."""
        if isinstance(receipt, Mapping) and "escrow" in info.data:
            return Receipt.from_body(parse_out_ref(info.data["escrow"]), receipt)
        return receipt

    @field_serializer("receipt")
    def _write_receipt(self, receipt: Receipt | None) -> dict[str, int | str] | None:
        return None if receipt is None else receipt.body()


class Journal:
    def __init__(self, state_dir: Path) -> None:
        self.directory = state_dir / "daemon" / "jobs"
        self.directory.mkdir(parents=True, exist_ok=True)

    def save(self, entry: JobEntry) -> None:
        """Write the entry atomically (a crash leaves the old or the new one, never half)."""
        path = self.directory / f"{entry.job_id}.json"
        temporary = path.with_suffix(".tmp")
        with open(temporary, "w") as file:
            file.write(entry.model_dump_json(indent=1))
            file.flush()
            os.fsync(file.fileno())
        temporary.replace(path)

    def get(self, job_id: str) -> JobEntry | None:
        path = self.directory / f"{job_id}.json"
        return JobEntry.model_validate_json(path.read_text()) if path.exists() else None

    def entries(self) -> list[JobEntry]:
        return [
            JobEntry.model_validate_json(path.read_text())
            for path in sorted(self.directory.glob("*.json"))
        ]

    def open_jobs(self) -> list[JobEntry]:
        """Jobs accepted and not yet settled or failed: each keeps its bond at stake."""
        return [entry for entry in self.entries() if entry.stage in OPEN]
