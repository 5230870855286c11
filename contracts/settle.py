"""Batch settle (PROTOCOL.md), the readable reference: a withdraw-zero that checks every escrow
input at once. The deployed script is `settle_uplc.py`, the same checks written by hand in
pluthon for cost; the tests run the same vectors against both.

Parameter: network_id. The escrow's Settle spend only asks for this script's withdrawal; this
run walks the inputs once, in ledger order, pairing each escrow (every script input, all of
one script) with its item: the units, who signed them (a claim over several escrows, or the
escrow's own receipt, checked at once), and the provider output that pays them. Each provider
output must hold the sum of what its escrows earn, and each escrow that earns anything names
that output's address as its provider; each run of adjacent escrows of one consumer is
refunded in one output, in order, from `first_refund` on. Payouts carry no datum: the
transaction's one withdrawal pins them all, and no other Plutus script runs in it (one
redeemer per escrow input and this one), so nothing else can count them.

OpShin tuples hold Data: the builtin lists the walk carries are wrapped in list Data there.
"""

from typing import Tuple

from opshin.prelude import *
from opshin.std.builtins import *

from contracts.onchain import *


def message(network_id: int, settle_hash: bytes, note: Anything, claims: Anything) -> bytes:
    """serialise_data of the Claim on `claims` (list Data)."""
    return serialise_data(Claim(b"UNCHAINED/claim/v1", network_id, settle_hash, note, claims))


def refund_run(refunds: Anything, consumer: Anything, total: int) -> Anything:
    """The outputs after a run of one consumer's escrows owed `total`: its one refund."""
    if total > 0:
        out = head_list(refunds)
        assert equals_data(head_list(fields(out)), consumer) and holds(out, total), (
            "consumer refund"
        )
        return tail_list(refunds)
    return refunds


def add_claim(
    accs: Anything, specs: Anything, c: int, vkey: bytes, ref: Anything, units: Anything
) -> Anything:
    """The claims' accumulators (each its claims list, as list Data) with the escrow added to
    claim c's, whose key must be the escrow's provider key."""
    if c > 0:
        return mk_cons(
            head_list(accs), add_claim(tail_list(accs), tail_list(specs), c - 1, vkey, ref, units)
        )
    spec: SettleClaim = head_list(specs)
    assert spec.vkey == vkey, "one key per claim"
    claims = mk_cons(ref, mk_cons(units, un_list_data(head_list(accs))))
    return mk_cons(list_data(claims), tail_list(accs))


def payouts(outputs: Anything, n: int, nothing: Anything) -> Anything:
    """[address, I 0] (list Data) for each of the first n outputs, the provider outputs."""
    if n == 0:
        return nothing
    address = head_list(fields(head_list(outputs)))
    acc = list_data(mk_cons(address, mk_cons(i_data(0), nothing)))
    return mk_cons(acc, payouts(tail_list(outputs), n - 1, nothing))


def empty_claims(specs: Anything, nothing: Anything) -> Anything:
    """One empty claims list (list Data) per claim."""
    if null_list(specs):
        return nothing
    return mk_cons(list_data(nothing), empty_claims(tail_list(specs), nothing))


def check_claims(specs: Anything, accs: Anything, network_id: int, settle_hash: bytes) -> None:
    """Each claim covers an escrow and is signed by its key."""
    if not null_list(specs):
        spec: SettleClaim = head_list(specs)
        claims = head_list(accs)
        assert not null_list(un_list_data(claims)) and verify_ed25519_signature(
            spec.vkey, message(network_id, settle_hash, spec.note, claims), spec.signature
        ), "claim signature"
        check_claims(tail_list(specs), tail_list(accs), network_id, settle_hash)


def settle_escrows(
    inputs: Anything,
    items: Anything,
    redeemers: Anything,
    receipts: Anything,
    claims: Anything,
    paid: Anything,
    consumer: Anything,
    total: int,
    refunds: Anything,
    specs: Anything,
    script: Anything,
    latest: int,
    network_id: int,
    settle_hash: bytes,
) -> Tuple[Anything, Anything, Anything, Anything, Anything, Anything, int, Anything]:
    """Walk the inputs from `inputs` on: `consumer`'s run is owed `total` so far, `refunds`
    are the outputs from its refund on, one item triple, one redeemer (and for an escrow
    signed alone one receipt) is used per escrow. Returns what is left of the items,
    redeemers and receipts, the claims' and payouts' accumulators, and the last run."""
    if null_list(inputs):
        return (
            list_data(items), map_data(redeemers), list_data(receipts), list_data(claims),
            list_data(paid), consumer, total, list_data(refunds),
        )  # fmt: skip
    escrow: InputV3 = head_list(inputs)
    credential = escrow.resolved.address.payment_credential
    if isinstance(credential, PubKeyCredential):  # a key's input (the fee's): no escrow
        return settle_escrows(
            tail_list(inputs), items, redeemers, receipts, claims, paid, consumer, total,
            refunds, specs, script, latest, network_id, settle_hash,
        )  # fmt: skip
    assert equals_data(credential, script), "one escrow script"
    datum: EscrowDatum = escrow.resolved.datum.datum
    units_data = head_list(items)
    units = un_i_data(units_data)
    signer = un_i_data(head_list(tail_list(items)))
    payee = un_i_data(head_list(tail_list(tail_list(items))))
    assert (
        units >= 0
        and units <= datum.max_units
        and datum.price_per_unit >= 0
        and latest <= datum.deadline + datum.settle_window
    ), "units or time"
    due = datum.price_per_unit * units
    rest = lovelace(escrow.resolved.value) - due - datum.fee_allowance
    owed = rest if rest > 0 else 0
    if signer < 0:
        receipt: SettleReceipt = head_list(receipts)
        alone = mk_cons(escrow.out_ref, mk_cons(units_data, tail_list(tail_list(fields(receipt)))))
        assert verify_ed25519_signature(
            datum.provider_vkey,
            message(network_id, settle_hash, receipt.note, list_data(alone)),
            receipt.signature,
        ), "receipt signature"
        receipts = tail_list(receipts)
    else:
        claims = add_claim(claims, specs, signer, datum.provider_vkey, escrow.out_ref, units_data)
    if payee < 0:
        assert due == 0, "provider payout"
    else:
        paid = add_payout(paid, payee, datum.provider, due)
    if equals_data(datum.consumer, consumer):
        total = total + owed
    else:
        refunds = refund_run(refunds, consumer, total)
        consumer = datum.consumer
        total = owed
    return settle_escrows(
        tail_list(inputs), tail_list(tail_list(tail_list(items))), tail_list(redeemers),
        receipts, claims, paid, consumer, total, refunds, specs, script, latest, network_id,
        settle_hash,
    )  # fmt: skip


def validator(network_id: int, context: BatchContext) -> None:
    purpose = context.purpose
    assert isinstance(purpose, RewardingScript), "purpose"
    tx = context.transaction
    latest = batch_upper_bound(tx)
    batch: BatchSettle = context.redeemer
    parts = fields(context.redeemer)
    items = un_list_data(head_list(parts))
    specs = un_list_data(head_list(tail_list(parts)))
    receipts = un_list_data(head_list(tail_list(tail_list(parts))))
    assert not null_list(items), "empty batch"
    nothing = tail_list(tail_list(tail_list(tail_list(parts))))  # the empty list
    outputs = un_list_data(tx.outputs)
    inputs = un_list_data(tx.inputs)
    settle_hash = purpose.credential.credential_hash
    rest, redeemers, receipts_left, claims, paid, consumer, total, refunds = settle_escrows(
        inputs,
        items,
        un_map_data(tx.redeemers),
        receipts,
        empty_claims(specs, nothing),
        payouts(outputs, batch.first_refund, nothing),
        i_data(0),  # no consumer yet: never an address
        0,
        drop_list(outputs, batch.first_refund),
        specs,
        first_script(inputs),
        latest,
        network_id,
        settle_hash,
    )
    refund_run(un_list_data(refunds), consumer, total)
    assert (
        null_list(un_list_data(rest))
        and null_list(un_list_data(receipts_left))
        and null_list(tail_list(un_map_data(redeemers)))
    ), (
        "one item per escrow input, one receipt per escrow signed alone, and no script but "
        "escrows and this withdrawal"
    )
    check_claims(specs, un_list_data(claims), network_id, settle_hash)
    check_payouts(outputs, un_list_data(paid))
