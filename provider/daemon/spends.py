"""How an escrow the daemon signed a receipt for was spent. An escrow gone from the chain may
have been settled, or refunded (or cancelled) to its consumer: only the spending transaction
tells. It is found by following the chain from the point where the daemon last saw the escrow
unspent, and it counts as earnings only if it spends the escrow with Settle for units: a
settle's payouts are merged and untagged, so what was earned is price x the units its batch
claimed for this escrow (the settle script checked the provider's output holds them)."""

from __future__ import annotations

import asyncio
import dataclasses

from pycardano import Transaction, TransactionInput

from offchain.chain.follower import Point, RollForward, follow, tip_point
from offchain.chain.utxo import format_out_ref, ogmios_out_ref
from offchain.protocol.tx_reader import Script, TxReader
from offchain.protocol.types import Settle

FIND_TIMEOUT_S = 120.0


@dataclasses.dataclass(frozen=True)
class Spend:
    tx_id: str
    settled_lovelace: int  # paid to the provider by a settle; 0 for a refund or cancel
    settled: bool


async def find_spend(
    url: str, escrow: TransactionInput, since: Point | None, price_per_unit: int
) -> Spend:
    """The transaction that spent `escrow` after `since`, read as a settle or not."""
    points = [since, "origin"] if since else ["origin"]

    async def search() -> Spend:
        tip = await tip_point(url)
        async for event in follow(url, points):
            if not isinstance(event, RollForward):
                continue
            for tx in event.block.get("transactions", []):
                if any(ogmios_out_ref(spent) == escrow for spent in tx.get("inputs", [])):
                    return read_spend(Transaction.from_cbor(tx["cbor"]), escrow, price_per_unit)
            if event.block["slot"] >= tip["slot"]:
                break
        raise LookupError(f"no transaction spending {format_out_ref(escrow)} found after {since}")

    return await asyncio.wait_for(search(), FIND_TIMEOUT_S)


def read_spend(tx: Transaction, escrow: TransactionInput, price_per_unit: int) -> Spend:
    """What `tx`, which spends `escrow`, paid the provider as a settlement: price x the units
    its batch claimed (the settle script checked the provider's output holds them)."""
    read = TxReader(tx)
    settled = isinstance(read.spend(escrow, Script.ESCROW), Settle)
    paid = price_per_unit * read.settled.get(escrow, 0) if settled else 0
    return Spend(str(tx.id), paid, settled and paid > 0)
