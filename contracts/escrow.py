"""Escrow multi-validator (PROTOCOL.md): spends escrow UTxOs; withdraw-zero settles a batch.

Parameter: network_id. Spending with Settle only asks for the withdrawal of the script's own
stake credential, whose run checks every escrow input of the transaction at once.
"""

from opshin.prelude import *
from opshin.std.builtins import *

from contracts.onchain import *

RECEIPT_DOMAIN = b"UNCHAINED/receipt/v1"


def lovelace(out: TxOut) -> int:
    return out.value[b""][b""]


def paid(out: TxOut, to: Address, amount: int, tag: OutputDatum) -> bool:
    """The output pays at least `amount` to exactly `to`, tagged with `tag` (inline)."""
    return out.address == to and lovelace(out) >= amount and out.datum == tag


def inline_datum(out: TxOut) -> Anything:
    datum = out.datum
    assert isinstance(datum, SomeOutputDatum), "inline datum required"
    return datum.datum


def spend(tx: TxInfoV3, purpose: SpendingScript, redeemer: EscrowRedeemer) -> None:
    own_ref = purpose.tx_out_ref
    own = [i.resolved for i in tx.inputs if i.out_ref == own_ref][0]
    if isinstance(redeemer, Settle):
        withdrawn = tx.withdrawals.get(own.address.payment_credential, -1)
        assert withdrawn >= 0, "settle needs the batch withdrawal"
    else:
        datum: EscrowDatum = purpose.datum.datum
        owed = lovelace(own) - datum.fee_allowance
        if isinstance(redeemer, Refund):
            lower = tx.validity_range.lower_bound.limit
            assert isinstance(lower, FinitePOSIXTime), "refund needs a lower bound"
            assert lower.time > datum.deadline + datum.settle_window, "refund before close"
            tag = SomeOutputDatum(Payout(1, own_ref))
            assert paid(tx.outputs[redeemer.consumer_output], datum.consumer, owed, tag)
        elif isinstance(redeemer, Cancel):
            signers = tx.signatories
            assert datum.consumer.payment_credential.credential_hash in signers, "consumer"
            assert blake2b_224(datum.provider_vkey) in signers, "provider must sign"
            tag = SomeOutputDatum(Payout(2, own_ref))
            assert paid(tx.outputs[redeemer.consumer_output], datum.consumer, owed, tag)


def settle(
    network_id: int, escrow_hash: bytes, tx: TxInfoV3, escrow: TxInInfo, item: SettleItem
) -> None:
    out = escrow.resolved
    datum: EscrowDatum = inline_datum(out)
    units = item.units
    assert units >= 0 and units <= datum.max_units, "units"
    price = datum.price_per_unit
    assert price >= 0, "price"
    upper = tx.validity_range.upper_bound.limit
    assert isinstance(upper, FinitePOSIXTime), "settle needs an upper bound"
    assert upper.time <= datum.deadline + datum.settle_window, "settle after close"
    ref = escrow.out_ref
    receipt = Receipt(
        RECEIPT_DOMAIN,
        network_id,
        escrow_hash,
        ref,
        units,
        item.result_hash,
        item.evidence_hash,
    )
    assert verify_ed25519_signature(datum.provider_vkey, serialise_data(receipt), item.signature), (
        "receipt signature"
    )
    due = price * units
    tag = SomeOutputDatum(Payout(0, ref))
    assert paid(tx.outputs[item.provider_output], datum.provider, due, tag), "provider"
    rest = lovelace(out) - due - datum.fee_allowance
    if rest > 0:
        assert paid(tx.outputs[item.consumer_output], datum.consumer, rest, tag), "consumer"


def batch(network_id: int, tx: TxInfoV3, purpose: RewardingScript, items: List[SettleItem]):
    own = purpose.credential
    escrow_hash = own.credential_hash
    n = 0
    for i in tx.inputs:
        if i.resolved.address.payment_credential == own:
            settle(network_id, escrow_hash, tx, i, items[n])
            n += 1
    assert n == len(items), "one item per escrow input"


def validator(network_id: int, context: ScriptContextV3) -> None:
    purpose = context.purpose
    if isinstance(purpose, SpendingScript):
        redeemer: EscrowRedeemer = context.redeemer
        spend(context.transaction, purpose, redeemer)
    elif isinstance(purpose, RewardingScript):
        batch_settle: BatchSettle = context.redeemer
        batch(network_id, context.transaction, purpose, batch_settle.items)
    else:
        assert False, "purpose"
