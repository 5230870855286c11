"""Batch settle (PROTOCOL.md), the readable reference: a withdraw-zero that checks every escrow
input at once. The deployed script is `settle_uplc.py`, the same checks written by hand in
pluthon for cost; the tests run the same vectors against both.

Parameter: network_id. The escrow's Settle spend only asks for this script's withdrawal; this
run walks the inputs once, in ledger order, pairing each escrow (every script input, all of
one script) with its item (units, group). Each group is one provider's signed Claim over the
out-refs and units of its escrows (`vkey` names the key, each escrow's provider key), paid in
its output (an escrow that earns anything must name that output's address), which must hold
the sum they earn; each run of adjacent escrows of one consumer is refunded in one output, in
order, from `first_refund` on. Payouts carry no datum: the transaction's one withdrawal pins
them all, and no other Plutus script runs in it (one redeemer per escrow input and this one),
so nothing else can count them.
"""

from typing import Tuple

from opshin.prelude import *
from opshin.std.builtins import *

from contracts.onchain import *


def no_datum(out: Anything) -> bool:
    """Whether a ledger TxOut carries no datum (NoOutputDatum = C0[])."""
    return equals_data(head_list(tail_list(tail_list(fields(out)))), NoOutputDatum())


def holds(out: Anything, amount: int) -> bool:
    """Whether output `out` holds at least `amount` lovelace, with no datum."""
    return lovelace(head_list(tail_list(fields(out)))) >= amount and no_datum(out)


def refund_run(refunds: Anything, consumer: Anything, total: int) -> Anything:
    """The outputs after a run of one consumer's escrows owed `total`: its one refund."""
    if total > 0:
        out = head_list(refunds)
        assert equals_data(head_list(fields(out)), consumer) and holds(out, total), (
            "consumer refund"
        )
        return tail_list(refunds)
    return refunds


def identity(outputs: Anything, spec: SettleGroup) -> Anything:
    """A group's [key, address] (list Data): the address of its output, or I 0 (no address)
    for a group owed nothing, whose escrows then may earn nothing."""
    address = (
        i_data(0) if spec.output < 0 else head_list(fields(index_access_list(outputs, spec.output)))
    )
    return list_data(
        mk_cons(
            b_data(spec.vkey),
            mk_cons(address, tail_list(tail_list(tail_list(tail_list(fields(spec)))))),
        )
    )


def claimed(
    acc: Anything,
    ident: Anything,
    vkey: bytes,
    provider: Anything,
    due: int,
    ref: Anything,
    units: Anything,
) -> Anything:
    """A group's accumulator [I sum, L claims] with one more escrow, of the group's key and,
    when it earns anything, paid to the group's address."""
    key_address = un_list_data(ident)
    assert equals_byte_string(un_b_data(head_list(key_address)), vkey) and (
        due == 0 or equals_data(head_list(tail_list(key_address)), provider)
    ), "one provider per group"
    parts = un_list_data(acc)
    total = un_i_data(head_list(parts)) + due
    claims = un_list_data(head_list(tail_list(parts)))
    return list_data(
        mk_cons(
            i_data(total),
            mk_cons(list_data(mk_cons(ref, mk_cons(units, claims))), tail_list(tail_list(parts))),
        )
    )


def add_claim(
    accs: Anything,
    idents: Anything,
    g: int,
    vkey: bytes,
    provider: Anything,
    due: int,
    ref: Anything,
    units: Anything,
) -> Anything:
    """The groups' accumulators with one escrow added to group g's."""
    if g > 0:
        return mk_cons(
            head_list(accs),
            add_claim(tail_list(accs), tail_list(idents), g - 1, vkey, provider, due, ref, units),
        )
    return mk_cons(
        claimed(head_list(accs), head_list(idents), vkey, provider, due, ref, units),
        tail_list(accs),
    )


def start(
    outputs: Anything, specs: Anything, accs: Anything, idents: Anything
) -> Tuple[Anything, Anything]:
    """One empty accumulator [I 0, L []] and one identity per group."""
    if null_list(specs):
        return (accs, idents)
    rest_accs, rest_idents = start(outputs, tail_list(specs), accs, idents)
    spec: SettleGroup = head_list(specs)
    empty = tail_list(tail_list(tail_list(tail_list(fields(spec)))))  # four fields dropped
    acc = list_data(mk_cons(i_data(0), mk_cons(list_data(empty), empty)))
    return (mk_cons(acc, rest_accs), mk_cons(identity(outputs, spec), rest_idents))


def check_groups(
    specs: Anything,
    accs: Anything,
    outputs: Anything,
    previous: int,
    first_refund: int,
    network_id: int,
    settle_hash: bytes,
) -> None:
    """Each group's claim signed by its key, and its sum paid in its output (outputs in
    increasing order, before the refunds: no output pays two groups or a group and a refund)."""
    if not null_list(specs):
        spec: SettleGroup = head_list(specs)
        parts = un_list_data(head_list(accs))
        total = un_i_data(head_list(parts))
        claims = head_list(tail_list(parts))
        claim = Claim(b"UNCHAINED/claim/v1", network_id, settle_hash, spec.note, claims)
        assert not null_list(un_list_data(claims)) and verify_ed25519_signature(
            spec.vkey, serialise_data(claim), spec.signature
        ), "claim signature"
        if spec.output < 0:
            assert total == 0, "provider payout"
            check_groups(
                tail_list(specs),
                tail_list(accs),
                outputs,
                previous,
                first_refund,
                network_id,
                settle_hash,
            )
        else:
            assert previous < spec.output and spec.output < first_refund, "provider output order"
            assert holds(index_access_list(outputs, spec.output), total), "provider payout"
            check_groups(
                tail_list(specs),
                tail_list(accs),
                outputs,
                spec.output,
                first_refund,
                network_id,
                settle_hash,
            )


def first_script(inputs: Anything) -> Anything:
    """The payment credential of the first script input."""
    escrow: InputV3 = head_list(inputs)
    credential = escrow.resolved.address.payment_credential
    if isinstance(credential, ScriptCredential):
        return credential
    return first_script(tail_list(inputs))


def settle_escrows(
    inputs: Anything,
    items: Anything,
    redeemers: Anything,
    accs: Anything,
    consumer: Anything,
    total: int,
    refunds: Anything,
    idents: Anything,
    script: Anything,
    latest: int,
) -> Tuple[Anything, Anything, Anything, Anything, int, Anything]:
    """Walk the inputs from `inputs` on: `consumer`'s run is owed `total` so far, `refunds`
    are the outputs from its refund on, one redeemer is tailed off per escrow. Returns what is
    left of the items and redeemers, the accumulators, and the last run (lists as list Data:
    a tuple holds Data)."""
    if null_list(inputs):
        return (
            list_data(items),
            map_data(redeemers),
            list_data(accs),
            consumer,
            total,
            list_data(refunds),
        )
    escrow: InputV3 = head_list(inputs)
    credential = escrow.resolved.address.payment_credential
    if isinstance(credential, PubKeyCredential):  # a key's input (the fee's): no escrow
        return settle_escrows(
            tail_list(inputs),
            items,
            redeemers,
            accs,
            consumer,
            total,
            refunds,
            idents,
            script,
            latest,
        )
    assert equals_data(credential, script), "one escrow script"
    datum: EscrowDatum = escrow.resolved.datum.datum
    units = un_i_data(head_list(items))
    g = un_i_data(head_list(tail_list(items)))
    assert (
        units >= 0
        and units <= datum.max_units
        and datum.price_per_unit >= 0
        and latest <= datum.deadline + datum.settle_window
    ), "units or time"
    due = datum.price_per_unit * units
    rest = lovelace(escrow.resolved.value) - due - datum.fee_allowance
    owed = rest if rest > 0 else 0
    accs = add_claim(
        accs, idents, g, datum.provider_vkey, datum.provider, due, escrow.out_ref, head_list(items)
    )
    if equals_data(datum.consumer, consumer):
        total = total + owed
    else:
        refunds = refund_run(refunds, consumer, total)
        consumer = datum.consumer
        total = owed
    return settle_escrows(
        tail_list(inputs),
        tail_list(tail_list(items)),
        tail_list(redeemers),
        accs,
        consumer,
        total,
        refunds,
        idents,
        script,
        latest,
    )


def validator(network_id: int, context: BatchContext) -> None:
    purpose = context.purpose
    assert isinstance(purpose, RewardingScript), "purpose"
    tx = context.transaction
    upper = tx.validity_range.upper_bound.limit
    assert null_list(tail_list(un_map_data(tx.withdrawals))) and isinstance(
        upper, FinitePOSIXTime
    ), "one withdrawal, and an upper bound"
    batch: BatchSettle = context.redeemer
    items = un_list_data(head_list(fields(context.redeemer)))
    specs = un_list_data(head_list(tail_list(fields(context.redeemer))))
    assert not null_list(items), "empty batch"
    outputs = un_list_data(tx.outputs)
    inputs = un_list_data(tx.inputs)
    nothing = tail_list(tail_list(tail_list(tail_list(fields(head_list(specs))))))  # []
    accs, idents = start(outputs, specs, nothing, nothing)
    rest, redeemers, accs, consumer, total, refunds = settle_escrows(
        inputs,
        items,
        un_map_data(tx.redeemers),
        accs,
        i_data(0),  # no consumer yet: never an address
        0,
        drop_list(outputs, batch.first_refund),
        idents,
        first_script(inputs),
        upper.time,
    )
    refund_run(refunds, consumer, total)
    assert null_list(rest) and null_list(tail_list(redeemers)), (
        "one item per escrow input, and no script but escrows and this withdrawal"
    )
    check_groups(
        specs, accs, outputs, -1, batch.first_refund, network_id, purpose.credential.credential_hash
    )
