"""Providers' records, read from the chain index, never from a provider's word: each escrow
of a provider that a block ends (settled for units: delivered; for none: failed; refunded
after its close: not delivered; cancelled by both) and each slash of its bond is one
ReputationEvent, counted per provider in ProviderReputation in the same database transaction,
so matching reads one row per offer. A rollback deletes the events of the blocks it undoes
and counts those providers again.

The escrow's and the bond's datums name the provider's key (`provider_vkey`), not only its
payout address (a cold one may be shared): the key's hash is the provider's id, as offers
carry it. Channels are counted from the channel index (claimed: a claim paid its provider;
drained: its renter took the rest back after the close period because the provider claimed
nothing more), and the time from a job's completion (the market took its receipt) to its
settle block from the job's own events: both for the explorer, not for matching.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from pycardano import PaymentVerificationKey
from sqlalchemy import delete, func
from sqlmodel import Session, col, select

from offchain.market.models import (
    ChainTxOut,
    Channel,
    ChannelEvent,
    ChannelMove,
    Job,
    JobEvent,
    JobState,
    ProviderReputation,
    ReputationEvent,
    ReputationKind,
)

# a spend's redeemer (by its type's name) that ends an escrow or a bond, and what it counts as
ENDINGS = {
    ("escrow", "Refund"): ReputationKind.REFUNDED,
    ("escrow", "Cancel"): ReputationKind.CANCELLED,
    ("bond", "Slash"): ReputationKind.SLASHED,
}
DELAY_SAMPLE = 200  # the newest delivered jobs the median completion-to-settle time reads


@dataclasses.dataclass(frozen=True)
class Reputation:
    """A provider's counts; `delivered_percent` is delivered of those that ran or should have
    (delivered, failed, refunded), floored, or -1 before its first."""

    delivered: int = 0
    failed: int = 0
    refunded: int = 0
    cancelled: int = 0
    slashed: int = 0
    channels_claimed: int = 0
    channels_drained: int = 0

    @property
    def delivered_percent(self) -> int:
        return delivered_percent(self.delivered, self.failed, self.refunded)


def delivered_percent(delivered: int, failed: int, refunded: int) -> int:
    judged = delivered + failed + refunded
    return delivered * 100 // judged if judged else -1


@dataclasses.dataclass(frozen=True)
class Ending:
    """One escrow (or bond) of `provider` ended as `kind`, by its out-ref `subject`."""

    provider: str
    kind: ReputationKind
    subject: str


def endings(view: dict[str, Any], spent: dict[str, ChainTxOut]) -> list[Ending]:
    """What one indexed transaction (`tx_view`; `spent`: the index's outputs it spends, by
    out-ref) ended."""
    found = []
    for row in view["settled"]:
        provider = _provider(spent.get(row["escrow"]))
        if provider is not None:
            kind = ReputationKind.DELIVERED if row["units"] else ReputationKind.FAILED
            found.append(Ending(provider, kind, row["escrow"]))
    for item in view["inputs"]:
        out, redeemer = spent.get(item["ref"]), item["redeemer"] or {}
        ending = ENDINGS.get((out.script or "", redeemer.get("type", ""))) if out else None
        provider = _provider(out)
        if ending is not None and provider is not None:
            found.append(Ending(provider, ending, item["ref"]))
    return found


def _provider(out: ChainTxOut | None) -> str | None:
    """The provider id an escrow or bond output's datum names: its vkey's hash."""
    if out is None or not out.datum:
        return None
    try:
        vkey = bytes.fromhex(json.loads(out.datum)["provider_vkey"])
        return PaymentVerificationKey(vkey).hash().payload.hex()
    except (KeyError, TypeError, ValueError):  # anyone can lock any datum at a script
        return None


def record(session: Session, ended: Iterable[Ending], tx_id: str, slot: int) -> None:
    """Add one transaction's endings and count them (the caller's database transaction)."""
    for end in ended:
        session.add(ReputationEvent(provider_id=end.provider, kind=end.kind, subject=end.subject,
                                    tx_id=tx_id, slot=slot))  # fmt: skip
        counts = session.get(ProviderReputation, end.provider) or ProviderReputation(
            provider_id=end.provider
        )
        setattr(counts, end.kind.value, getattr(counts, end.kind.value) + 1)
        session.add(counts)


def roll_back(session: Session, slot: int) -> None:
    """Forget the endings after `slot` and count their providers again."""
    undone = session.exec(
        select(ReputationEvent.provider_id).where(col(ReputationEvent.slot) > slot).distinct()
    ).all()
    if not undone:
        return
    session.execute(delete(ReputationEvent).where(col(ReputationEvent.slot) > slot))
    session.flush()
    kept = _counted(session, undone)
    for provider in undone:
        counts = session.get(ProviderReputation, provider) or ProviderReputation(
            provider_id=provider
        )
        for kind in ReputationKind:
            setattr(counts, kind.value, kept[provider][kind])
        session.add(counts)


def _counted(session: Session, providers: Sequence[str]) -> dict[str, Counter[ReputationKind]]:
    rows = session.exec(
        select(ReputationEvent.provider_id, ReputationEvent.kind, func.count())
        .where(col(ReputationEvent.provider_id).in_(providers))
        .group_by(col(ReputationEvent.provider_id), col(ReputationEvent.kind))
    ).all()  # fmt: skip
    counted: dict[str, Counter[ReputationKind]] = {p: Counter() for p in providers}
    for provider, kind, count in rows:
        counted[provider][ReputationKind(kind)] = count
    return counted


def of(session: Session, providers: Sequence[str]) -> dict[str, Reputation]:
    """Each of `providers`' counts, its channels' too."""
    rows = {
        r.provider_id: r
        for r in session.exec(
            select(ProviderReputation).where(col(ProviderReputation.provider_id).in_(providers))
        )
    }
    channels = _channels(session, providers)
    found = {}
    for provider in providers:
        row = rows.get(provider)
        counts = {k.value: getattr(row, k.value) for k in ReputationKind} if row else {}
        found[provider] = Reputation(**counts, **channels.get(provider, {}))
    return found


def _channels(session: Session, providers: Sequence[str]) -> dict[str, dict[str, int]]:
    """Per provider, its channels claimed at least once and those drained by their renter."""
    rows = session.exec(
        select(Channel.provider_id, ChannelEvent.move, func.count(func.distinct(Channel.id)))
        .join(ChannelEvent, col(ChannelEvent.channel_id) == col(Channel.id))
        .where(col(Channel.provider_id).in_(providers),
               col(ChannelEvent.move).in_((ChannelMove.CLAIM, ChannelMove.DRAIN)))
        .group_by(col(Channel.provider_id), col(ChannelEvent.move))
    ).all()  # fmt: skip
    found: dict[str, dict[str, int]] = {}
    for provider, move, count in rows:
        name = "channels_claimed" if move == ChannelMove.CLAIM else "channels_drained"
        found.setdefault(provider, {})[name] = count
    return found


def completion_to_settle_ms(
    session: Session, provider: str, slot_ms: Callable[[int], int]
) -> int | None:
    """The median time from a delivered job's completion (the market took its receipt) to
    the block that settled it, over its newest DELAY_SAMPLE; None before the first."""
    rows = session.exec(
        select(ReputationEvent.slot, func.min(JobEvent.at_ms))
        .join(Job, col(Job.escrow_ref) == col(ReputationEvent.subject))
        .join(JobEvent, col(JobEvent.job_id) == col(Job.id))
        .where(ReputationEvent.provider_id == provider,
               ReputationEvent.kind == ReputationKind.DELIVERED,
               JobEvent.to_state == JobState.COMPLETED)
        .group_by(col(ReputationEvent.id), col(ReputationEvent.slot))
        .order_by(col(ReputationEvent.slot).desc()).limit(DELAY_SAMPLE)
    ).all()  # fmt: skip
    delays = [max(0, slot_ms(slot) - completed) for slot, completed in rows]
    return int(statistics.median_low(delays)) if delays else None
