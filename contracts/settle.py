"""Batch settle (PROTOCOL.md), the readable reference: a withdraw-zero that checks every escrow
input at once. The deployed script is `settle_uplc.py`, the same checks written by hand in
pluthon for cost; the tests run the same vectors against both, so this one follows it step for
step, down to which Data it compares raw and which check fails first.

Parameter: network_id. The escrow's Settle spend only asks for this script's withdrawal; this
run walks the inputs once, in ledger order, pairing each escrow (every script input, all of
one script) with its item (units, group). Each group is one provider's signed Claim over the
out-refs and units of its escrows (`vkey` names the key, each escrow's provider key), paid in
its output (an escrow that earns anything must name that output's address), which must hold
the sum they earn; each run of adjacent escrows of one consumer is refunded in one output, in
order, from `first_refund` on. Payouts carry no datum: the transaction's one withdrawal pins
them all, and no other Plutus script runs in it (one redeemer per escrow input and this one),
so nothing else can count them.

Lists are builtin lists typed Anything (OpShin passes them through untouched); a group's state
is list Data `[vkey, address, I sum, L claims]`, and a tuple holds Data, so the walk hands its
lists back wrapped in list Data.
"""

from typing import Tuple

from opshin.prelude import *
from opshin.std.builtins import *

from contracts.onchain import *

NO_CONSUMER = 0  # the run before the first escrow's: I 0, never an address


def paid(out: Anything, amount: int) -> bool:
    """Whether the output fields `out` hold at least `amount` lovelace, with no datum."""
    return lovelace(head_list(tail_list(out))) >= amount and equals_data(
        head_list(tail_list(tail_list(out))), NoOutputDatum()
    )


def refund_run(refunds: Anything, consumer: Anything, total: int) -> Anything:
    """The outputs after a run of one consumer's escrows owed `total`: its refund, if owed."""
    if total > 0:
        out = fields(head_list(refunds))
        assert equals_data(head_list(out), consumer) and paid(out, total), "consumer refund"
        return tail_list(refunds)
    return refunds


def drop(xs: Anything, n: int) -> Anything:
    """`xs` without its first n elements: fails for n negative or past the end."""
    if n == 0:
        return xs
    return drop(tail_list(xs), n - 1)


def nth(xs: Anything, i: int) -> Anything:
    """Element i of `xs` (i >= 0); fails past the end."""
    if i == 0:
        return head_list(xs)
    return nth(tail_list(xs), i - 1)


def new_groups(outputs: Anything, specs: Anything, empty: Anything) -> Anything:
    """Each group's state before the walk, `[vkey, address, I 0, L []]`: the address that of
    its output, or I 0 (none) for a group paid nothing, whose escrows may then earn nothing."""
    if null_list(specs):
        return empty
    spec = fields(head_list(specs))
    output = un_i_data(head_list(tail_list(tail_list(spec))))
    address = i_data(0) if output < 0 else head_list(fields(nth(outputs, output)))
    vkey = head_list(tail_list(tail_list(tail_list(spec))))
    state = mk_cons(vkey, mk_cons(address, mk_cons(i_data(0), mk_cons(list_data(empty), empty))))
    return mk_cons(list_data(state), new_groups(outputs, tail_list(specs), empty))


def add_escrow(
    groups: Anything,
    g: int,
    vkey: Anything,
    provider: Anything,
    due: int,
    ref: Anything,
    units: Anything,
) -> Anything:
    """The groups' states with one escrow added to group g's: the escrow must be of the
    group's key and, when it earns anything, of its address. Its out-ref and units go in
    front of the group's claims, so they end in descending ledger order."""
    if g == 0:
        state = un_list_data(head_list(groups))
        address = head_list(tail_list(state))
        assert equals_data(vkey, head_list(state)) and (
            due == 0 or equals_data(provider, address)
        ), "one provider per group"
        sum_claims = tail_list(tail_list(state))
        total = un_i_data(head_list(sum_claims)) + due
        claims = mk_cons(ref, mk_cons(units, un_list_data(head_list(tail_list(sum_claims)))))
        rest = mk_cons(i_data(total), mk_cons(list_data(claims), tail_list(tail_list(sum_claims))))
        return mk_cons(
            list_data(mk_cons(head_list(state), mk_cons(address, rest))), tail_list(groups)
        )
    return mk_cons(
        head_list(groups), add_escrow(tail_list(groups), g - 1, vkey, provider, due, ref, units)
    )


def check_groups(
    specs: Anything,
    groups: Anything,
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
        sum_claims = tail_list(tail_list(un_list_data(head_list(groups))))
        total = un_i_data(head_list(sum_claims))
        claims = head_list(tail_list(sum_claims))
        note = head_list(fields(spec))  # as the group gives it: signed, never read
        claim = Claim(b"UNCHAINED/claim/v1", network_id, settle_hash, note, claims)
        signed = verify_ed25519_signature(spec.vkey, serialise_data(claim), spec.signature)
        assert not null_list(un_list_data(claims)) and signed, "claim signature"
        output = spec.output
        if output < 0:
            assert total == 0, "provider payout"
            check_groups(
                tail_list(specs),
                tail_list(groups),
                outputs,
                previous,
                first_refund,
                network_id,
                settle_hash,
            )
        else:
            assert previous < output and output < first_refund, "provider output order"
            assert paid(fields(nth(outputs, output)), total), "provider payout"
            check_groups(
                tail_list(specs),
                tail_list(groups),
                outputs,
                output,
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
    groups: Anything,
    consumer: Anything,
    total: int,
    refunds: Anything,
    script: Anything,
    latest: int,
) -> Tuple[Anything, Anything, Anything, Anything, int, Anything]:
    """Walk the inputs from `inputs` on: `consumer`'s run is owed `total` so far, `refunds`
    are the outputs from its refund on, one redeemer is tailed off per escrow. Returns what is
    left of the items and redeemers, the groups, and the last run (its lists as Data)."""
    if null_list(inputs):
        return (
            list_data(items),
            map_data(redeemers),
            list_data(groups),
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
            groups,
            consumer,
            total,
            refunds,
            script,
            latest,
        )
    assert equals_data(credential, script), "one escrow script"
    datum: EscrowDatum = escrow.resolved.datum.datum
    price = datum.price_per_unit
    units = un_i_data(head_list(items))
    g = un_i_data(head_list(tail_list(items)))
    max_units = datum.max_units
    close = datum.deadline + datum.settle_window
    assert units >= 0 and units <= max_units and price >= 0 and latest <= close, "units or time"
    due = price * units
    rest = lovelace(escrow.resolved.value) - due - datum.fee_allowance
    owed = rest if rest > 0 else 0
    vkey = head_list(tail_list(tail_list(fields(datum))))  # compared as Data, as it is signed
    groups = add_escrow(groups, g, vkey, datum.provider, due, escrow.out_ref, head_list(items))
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
        groups,
        consumer,
        total,
        refunds,
        script,
        latest,
    )


def validator(network_id: int, context: BatchContext) -> None:
    purpose = context.purpose
    assert isinstance(purpose, RewardingScript), "purpose"
    settle_hash = purpose.credential.credential_hash
    tx = context.transaction
    upper = tx.validity_range.upper_bound.limit
    assert null_list(tail_list(un_map_data(tx.withdrawals))) and isinstance(
        upper, FinitePOSIXTime
    ), "one withdrawal, and an upper bound"
    redeemer = fields(context.redeemer)
    items = un_list_data(head_list(redeemer))
    specs = un_list_data(head_list(tail_list(redeemer)))
    first_refund = un_i_data(head_list(tail_list(tail_list(redeemer))))
    outputs = un_list_data(tx.outputs)
    inputs = un_list_data(tx.inputs)
    head_list(specs)  # a batch has a group (failing here, as the deployed script does)
    groups = new_groups(outputs, specs, fields(NoOutputDatum()))  # C0[]'s fields: []
    script = first_script(inputs)
    assert not null_list(items), "empty batch"
    rest, redeemers, groups_d, consumer, total, refunds = settle_escrows(
        inputs,
        items,
        un_map_data(tx.redeemers),
        groups,
        i_data(NO_CONSUMER),
        0,
        drop(outputs, first_refund),
        script,
        upper.time,
    )
    refund_run(un_list_data(refunds), consumer, total)
    assert null_list(un_list_data(rest)) and null_list(tail_list(un_map_data(redeemers))), (
        "one item per escrow input, and no script but escrows and this withdrawal"
    )
    check_groups(specs, un_list_data(groups_d), outputs, -1, first_refund, network_id, settle_hash)
