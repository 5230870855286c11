"""Slot <-> POSIX time as the ledger converts them, from Ogmios's era summaries.

Scripts see validity bounds in POSIX milliseconds, transactions carry slots: builders convert
with the chain's own era history (slot lengths can change at a hard fork), never a constant.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

from offchain.chain.ogmios import request_sync
from offchain.core.errors import UnchainedError


class PastHorizon(UnchainedError, ValueError):
    """The time is beyond what the chain can convert yet (the ledger refuses it too)."""


@dataclasses.dataclass(frozen=True)
class Era:
    start_slot: int
    start_ms: int  # since system start
    end_slot: int | None  # the forecast horizon for the current era
    slot_length_ms: int


@dataclasses.dataclass(frozen=True)
class ChainTime:
    system_start_ms: int
    eras: tuple[Era, ...]

    @classmethod
    def from_ogmios(cls, start_time: str, summaries: list[dict[str, Any]]) -> ChainTime:
        """From `queryNetwork/startTime` and `queryLedgerState/eraSummaries` answers."""
        start = datetime.fromisoformat(start_time.replace("Z", "+00:00"))
        eras = tuple(
            Era(
                start_slot=s["start"]["slot"],
                start_ms=s["start"]["time"]["seconds"] * 1000,
                end_slot=s["end"]["slot"] if s.get("end") else None,
                slot_length_ms=s["parameters"]["slotLength"]["milliseconds"],
            )
            for s in summaries
            if not s.get("end") or s["end"]["slot"] > s["start"]["slot"]  # skip empty eras
        )
        return cls(int(start.timestamp() * 1000), eras)

    def slot_to_posix_ms(self, slot: int) -> int:
        """When `slot` begins (what a script sees for a validity bound at `slot`)."""
        for era in self.eras:
            if era.start_slot <= slot and (era.end_slot is None or slot < era.end_slot):
                offset = (slot - era.start_slot) * era.slot_length_ms
                return self.system_start_ms + era.start_ms + offset
        raise PastHorizon(f"slot {slot} is beyond the chain's forecast horizon")

    def posix_ms_to_slot(self, posix_ms: int) -> int:
        """The slot holding the instant `posix_ms`."""
        relative = posix_ms - self.system_start_ms
        for era in self.eras:
            slot = era.start_slot + (relative - era.start_ms) // era.slot_length_ms
            if era.start_ms <= relative and (era.end_slot is None or slot < era.end_slot):
                return slot
        raise PastHorizon(f"{iso(posix_ms)} is beyond the chain's forecast horizon")


def iso(posix_ms: int) -> str:
    """A POSIX ms time as people read it in error messages (UTC, to the second)."""
    return datetime.fromtimestamp(posix_ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def read_chain_time(url: str) -> ChainTime:
    """The chain's slot <-> POSIX time conversion, read synchronously (beside pycardano's own
    calls)."""
    return ChainTime.from_ogmios(
        request_sync(url, "queryNetwork/startTime"),
        request_sync(url, "queryLedgerState/eraSummaries"),
    )
