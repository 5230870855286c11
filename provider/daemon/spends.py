"""How an output the daemon watches was spent: only the spending transaction tells, and only
its redeemers, which the scripts checked, can be trusted (anyone can pay a script address an
output that looks like another). It is found by following the chain from the newest of the points
where the daemon saw the output unspent that is still on chain (`resume.py`).

An escrow the daemon signed a receipt for may have been settled, or refunded (or cancelled)
to its consumer: it counts as earnings only if it was spent with Settle for units. A settle's
payouts are merged and untagged, so what was earned is price x the units its batch claimed
for this escrow (the settle script checked the provider's output holds them).

A channel the provider serves goes on at the output its spend names: only that one is the
channel (a copy of its datum paid to its address by anyone is not), or it has ended."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence

from pycardano import Transaction, TransactionInput

from offchain.chain.follower import Point, RollForward, follow, tip_point
from offchain.chain.utxo import format_out_ref, spent_by
from offchain.protocol.ledger.types import (
    ChannelClaim,
    ChannelTopUp,
    Drain,
    MutualClose,
    ProviderEnd,
    Settle,
    StartClose,
)
from offchain.protocol.tx.tx_reader import Script, TxReader
from provider.daemon.resume import Block, point_of

FIND_TIMEOUT_S = 120.0


@dataclasses.dataclass(frozen=True)
class Spend:
    tx_id: str
    settled_lovelace: int  # paid to the provider by a settle; 0 for a refund or cancel
    settled: bool


@dataclasses.dataclass(frozen=True)
class Found:
    """A spending transaction, the block ({slot, id, height}) that holds it, and the point
    the search started after (the newest resume point on chain, or "origin")."""

    tx: Transaction
    block: Block
    after: Point


async def spending_transaction(url: str, ref: TransactionInput, since: Sequence[Point]) -> Found:
    """The transaction that spent `ref` after the newest of the resume points `since` still on
    chain (newest first; the chain's origin when none is), up to the tip; LookupError when
    none did."""
    points = [point_of(point) for point in since] + ["origin"]

    async def search() -> Found:
        tip = await tip_point(url)
        assert isinstance(tip, dict), "a chain with no block has spent nothing"
        after: Point = "origin"
        async for event in follow(url, points):
            if not isinstance(event, RollForward):
                after = event.point  # the first event: the intersection
                continue
            for tx in event.block.get("transactions", []):
                if ref in spent_by(tx):
                    block = {key: event.block[key] for key in ("slot", "id", "height")}
                    return Found(Transaction.from_cbor(tx["cbor"]), block, after)
            if event.block["slot"] >= tip["slot"]:
                break
        raise LookupError(f"no transaction spending {format_out_ref(ref)} found after "
                          f"{points[0]}")  # fmt: skip

    return await asyncio.wait_for(search(), FIND_TIMEOUT_S)


async def find_spend(
    url: str, escrow: TransactionInput, since: Sequence[Point], price_per_unit: int
) -> tuple[Spend, Block]:
    """The transaction that spent `escrow` after `since`, read as a settle or not, and its
    block."""
    found = await spending_transaction(url, escrow, since)
    return read_spend(found.tx, escrow, price_per_unit), found.block


def read_spend(tx: Transaction, escrow: TransactionInput, price_per_unit: int) -> Spend:
    """What `tx`, which spends `escrow`, paid the provider as a settlement: price x the units
    its batch claimed (the settle script checked the provider's output holds them)."""
    read = TxReader(tx)
    settled = isinstance(read.spend(escrow, Script.ESCROW), Settle)
    paid = price_per_unit * read.settled.get(escrow, 0) if settled else 0
    return Spend(str(tx.id), paid, settled and paid > 0)


def channel_moved(tx: Transaction, channel: TransactionInput) -> TransactionInput | None:
    """Where the channel at `channel` went in `tx`, which spent it, as the redeemer its script
    checked says: the continuing output of a batch claim (the claim script pairs it), a top-up
    or a start of close; None when `tx` ended it (drained, ended by its provider, or closed by
    both). ValueError when `tx` spent it by no channel redeemer."""
    read = TxReader(tx)
    match read.spend(channel, Script.CHANNEL):
        case ChannelClaim():
            index = read.continuing[channel]
        case ChannelTopUp(output=index) | StartClose(output=index):
            pass
        case Drain() | ProviderEnd() | MutualClose():
            return None
        case _:
            raise ValueError(f"{tx.id} spent channel {format_out_ref(channel)} by no channel "
                             "redeemer")  # fmt: skip
    return TransactionInput(tx.id, index)
