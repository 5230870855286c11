"""How an escrow the daemon signed a receipt for was spent. An escrow gone from the chain may
have been settled, or refunded (or cancelled) to its consumer: only the spending transaction
tells. It is found by following the chain from the point where the daemon last saw the escrow
unspent, and it counts as earnings only if it spends the escrow with Settle and pays the
provider's address an output tagged Payout(settle, this escrow): what that output holds is
what was earned (the validator checked the split, so the tag can be believed)."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from pycardano import Address, RawCBOR, RedeemerMap, Transaction, TransactionOutput

from offchain.chain.follower import Point, RollForward, follow, tip_point
from offchain.chain.utxo import parse_out_ref
from offchain.protocol.types import Payout, PayoutKind, TxOutRef

SETTLE_REDEEMER = 0  # the escrow's Settle constructor
SPEND = 0  # the redeemer tag of a spend
FIND_TIMEOUT_S = 120.0


@dataclasses.dataclass(frozen=True)
class Spend:
    tx_id: str
    settled_lovelace: int  # paid to the provider by a settle; 0 for a refund or cancel
    settled: bool


def _ref(ref: dict[str, Any]) -> str:
    return f"{ref['transaction']['id']}#{ref['index']}"


async def find_spend(url: str, escrow: str, since: Point | None, provider: Address) -> Spend:
    """The transaction that spent `escrow` after `since`, read as a settle or not."""
    points = [since, "origin"] if since else ["origin"]

    async def search() -> Spend:
        tip = await tip_point(url)
        async for event in follow(url, points):
            if not isinstance(event, RollForward):
                continue
            for tx in event.block.get("transactions", []):
                if any(_ref(spent) == escrow for spent in tx.get("inputs", [])):
                    return read_spend(Transaction.from_cbor(tx["cbor"]), escrow, provider)
            if event.block["slot"] >= tip["slot"]:
                break
        raise LookupError(f"no transaction spending {escrow} found after {since}")

    return await asyncio.wait_for(search(), FIND_TIMEOUT_S)


def read_spend(tx: Transaction, escrow: str, provider: Address) -> Spend:
    """What `tx`, which spends `escrow`, paid the provider as a settlement."""
    body = tx.transaction_body
    ref = parse_out_ref(escrow)
    ledger = sorted(body.inputs, key=lambda i: (i.transaction_id.payload, i.index))
    position = ledger.index(ref)
    redeemers = tx.transaction_witness_set.redeemer or []
    pairs = (
        [(key.tag.value, key.index, value.data) for key, value in redeemers.items()]
        if isinstance(redeemers, RedeemerMap)
        else [(r.tag.value, r.index, r.data) for r in redeemers]
    )
    settled = any(
        tag == SPEND and index == position and _constructor(data) == SETTLE_REDEEMER
        for tag, index, data in pairs
    )
    tag = Payout(int(PayoutKind.SETTLE), TxOutRef.of(ref))
    paid = sum(
        output.amount.coin
        for output in body.outputs
        if settled and output.address == provider and _payout(output) == tag
    )
    return Spend(str(tx.id), paid, settled and paid > 0)


def _constructor(data: Any) -> int | None:
    """The constructor index of a redeemer's Plutus data (121.. are constructors 0..6)."""
    if hasattr(data, "CONSTR_ID"):
        return data.CONSTR_ID
    tag = getattr(getattr(data, "data", None), "tag", None)
    return tag - 121 if isinstance(tag, int) and 121 <= tag <= 127 else None


def _payout(output: TransactionOutput) -> Payout | None:
    """The output's Payout tag, if its inline datum is one."""
    datum = output.datum
    if datum is None:
        return None
    try:
        return Payout.from_cbor(datum.cbor if isinstance(datum, RawCBOR) else datum.to_cbor())
    except Exception:  # any other datum: not a payout
        return None
