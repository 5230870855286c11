"""Escrow multi-validator (PROTOCOL.md): spends escrow UTxOs; withdraw-zero settles a batch.

Parameters: network_id, refund_window_ms. Spending with Settle only asks for the withdrawal of
the script's own stake credential, whose run checks every escrow input of the transaction at
once (and refuses a run with none: nobody withdraws the script's reward account alone). For
refund_window_ms after the close only the consumer may refund (and slash with it).

Shaped for cost under OpShin 0.28 (see contracts/simplify.py for the rest): every `if`
statement passes all live locals to a continuation and every call passes the globals the
callee uses, so functions are few and checks are `assert`s over `and` chains; inputs and
outputs are reached by index, each list (and each record's field list) is walked once, and
OpShin's typed lists, which copy on every read, are avoided on the hot path.
"""

from typing import Tuple

from opshin.prelude import *
from opshin.std.builtins import *

from contracts.onchain import *


def settle_one(
    network_id: int,
    escrow_hash: bytes,
    latest: int,
    escrow: InputV3,
    items: Anything,
    outputs: Anything,
    next_output: int,
) -> Tuple[Anything, Anything, int]:
    """Check one escrow against the next item (lists as list Data); the state after it."""
    pending = un_list_data(items)
    item = fields(head_list(pending))  # SettleItem's fields, walked once like the datum's
    units = un_i_data(head_list(item))
    item = tail_list(item)
    result_hash = un_b_data(head_list(item))
    item = tail_list(item)
    evidence_hash = un_b_data(head_list(item))
    item = tail_list(item)
    signature = un_b_data(head_list(item))
    item = tail_list(item)
    index = un_i_data(head_list(item))
    consumer = un_i_data(head_list(tail_list(item)))
    out = escrow.resolved
    # EscrowDatum's fields in one walk (each `datum.x` would walk the field list again)
    rest_fields = fields(out.datum.datum)
    consumer_address: Address = head_list(rest_fields)
    rest_fields = tail_list(rest_fields)
    provider_address: Address = head_list(rest_fields)
    rest_fields = tail_list(rest_fields)
    provider_vkey = un_b_data(head_list(rest_fields))
    rest_fields = tail_list(rest_fields)
    price = un_i_data(head_list(rest_fields))
    rest_fields = tail_list(rest_fields)
    max_units = un_i_data(head_list(rest_fields))
    rest_fields = tail_list(rest_fields)
    close = un_i_data(head_list(rest_fields)) + un_i_data(head_list(tail_list(rest_fields)))
    fee_allowance = un_i_data(head_list(tail_list(tail_list(tail_list(rest_fields)))))
    ref = escrow.out_ref
    assert units >= 0 and units <= max_units and price >= 0 and latest <= close, "units or time"
    receipt = Receipt(
        b"UNCHAINED/receipt/v1",
        network_id,
        escrow_hash,
        ref,
        units,
        result_hash,
        evidence_hash,
    )
    assert verify_ed25519_signature(provider_vkey, serialise_data(receipt), signature), (
        "receipt signature"
    )
    tag = SomeOutputDatum(Payout(0, ref))
    due = price * units
    # a provider owed nothing (a refusal's zero-unit receipt) has no output: `index` is
    # ignored, as `consumer` is when nothing is left for the consumer
    paid = due > 0
    skip = index - next_output
    after = un_list_data(outputs)
    after = drop_list(after, skip) if paid and skip > 0 else after
    payout: InlineTxOut = head_list(after) if paid else out
    assert not paid or (
        skip >= 0
        and payout.address == provider_address
        and lovelace(payout.value) >= due
        and payout.datum == tag
    ), "provider payout"
    rest = lovelace(out.value) - due - fee_allowance
    start = index + 1 if paid else next_output
    skip = consumer - start
    after = tail_list(after) if paid else after
    after = drop_list(after, skip) if rest > 0 and skip > 0 else after
    payout: InlineTxOut = head_list(after) if rest > 0 else payout
    assert rest <= 0 or (
        skip >= 0
        and payout.address == consumer_address
        and lovelace(payout.value) >= rest
        and payout.datum == tag
    ), "consumer payout"
    return (
        list_data(tail_list(pending)),
        list_data(tail_list(after) if rest > 0 else after),
        consumer + 1 if rest > 0 else start,
    )


def settle_batch(network_id: int, tx: TxInfoV3, credential: Credential, redeemer: Anything):
    """Pair the escrow inputs (ledger order) with the BatchSettle items, one to one."""
    upper = tx.validity_range.upper_bound.limit
    assert isinstance(upper, FinitePOSIXTime), "settle needs an upper bound"
    latest = upper.time
    escrow_hash = credential.credential_hash
    items = head_list(fields(redeemer))
    # every item pairs with an escrow input (checked at the end): none, and the withdrawal
    # would take the reward account's balance with no escrow settled
    assert not null_list(un_list_data(items)), "empty batch"
    outputs = tx.outputs
    next_output = 0
    inputs: List[InputV3] = tx.inputs
    for escrow in inputs:
        if escrow.resolved.address.payment_credential == credential:
            items, outputs, next_output = settle_one(
                network_id, escrow_hash, latest, escrow, items, outputs, next_output
            )
    assert null_list(un_list_data(items)), "one item per escrow input"


def pay_back(
    refund_window_ms: int,
    tx: TxInfoV3,
    purpose: SpendingScript,
    own: InputV3,
    redeemer: EscrowRedeemer,
):
    """Refund (the consumer after close, anyone once the refund window is over too) or Cancel
    (both parties): the consumer gets it back. The lower bound cannot be later than the
    inclusion, so a refund past the window cannot come early."""
    datum: EscrowDatum = purpose.datum.datum
    signers = tx.signatories
    consumer_signs = datum.consumer.payment_credential.credential_hash in signers
    if isinstance(redeemer, Refund):
        lower = tx.validity_range.lower_bound.limit
        assert isinstance(lower, FinitePOSIXTime), "refund needs a lower bound"
        close = datum.deadline + datum.settle_window
        assert lower.time > close, "refund before close"
        assert consumer_signs or lower.time > close + refund_window_ms, (
            "only the consumer refunds in the refund window"
        )
    else:
        assert consumer_signs, "consumer signs"
        assert blake2b_224(datum.provider_vkey) in signers, "provider must sign"
    out: InlineTxOut = index_access_list(un_list_data(tx.outputs), redeemer.consumer_output)
    assert out.address == datum.consumer, "payout address"
    assert lovelace(out.value) >= lovelace(own.resolved.value) - datum.fee_allowance, "amount"
    assert out.datum == SomeOutputDatum(Payout(redeemer.CONSTR_ID, purpose.tx_out_ref)), "tag"


def validator(network_id: int, refund_window_ms: int, context: ScriptContextV3) -> None:
    purpose = context.purpose
    tx = context.transaction
    if isinstance(purpose, SpendingScript):
        redeemer: EscrowRedeemer = context.redeemer
        own: InputV3 = head_list(skip_list(un_list_data(tx.inputs), redeemer.own_input))
        assert own.out_ref == purpose.tx_out_ref, "own_input is not the spent escrow"
        if isinstance(redeemer, Settle):
            credential = own.resolved.address.payment_credential
            assert tx.withdrawals.get(credential, -1) >= 0, "settle needs the batch withdrawal"
        else:
            pay_back(refund_window_ms, tx, purpose, own, redeemer)
    else:
        assert isinstance(purpose, RewardingScript), "purpose"
        settle_batch(network_id, tx, purpose.credential, context.redeemer)
