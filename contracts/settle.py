"""Batch settle (PROTOCOL.md): a withdraw-zero that checks every escrow input at once.

Parameter: network_id. The escrow's Settle spend only asks for this script's withdrawal; this
run walks the inputs once, in ledger order, pairing each escrow (every script input) with its
item (units, group). Each group is one provider's signed Claim over the out-refs and units of
its escrows, paid in one output that must hold the sum they earn; each run of adjacent escrows
of one consumer is refunded in one output, in order, from `first_refund` on. Payouts carry no
datum: the transaction's one withdrawal pins them all, and no other Plutus script runs in it
(one redeemer per escrow input and this one), so nothing else can count them.

Shaped for cost like escrow.py, and linear in the batch: every list is walked once but the
groups, where an escrow's claim is added at its group's index (the builder puts the largest
group first).
"""

from opshin.prelude import *
from opshin.std.builtins import *

from contracts.onchain import *


def no_datum(out: Anything) -> bool:
    """Whether a ledger TxOut carries no datum (NoOutputDatum = C0[])."""
    return equals_data(head_list(tail_list(tail_list(fields(out)))), NoOutputDatum())


def paid(out: Anything, address: Anything, amount: int) -> bool:
    """Whether output `out` pays at least `amount` to `address`, with no datum."""
    return (
        equals_data(head_list(fields(out)), address)
        and lovelace(head_list(tail_list(fields(out)))) >= amount
        and no_datum(out)
    )


def refund_run(refunds: Anything, consumer: Anything, total: int) -> Anything:
    """The outputs after a run of one consumer's escrows owed `total`: its one refund."""
    if total > 0:
        assert paid(head_list(refunds), consumer, total), "consumer refund"
        return tail_list(refunds)
    return refunds


def claimed(
    acc: Anything, vkey: bytes, provider: Anything, due: int, ref: Anything, units: Anything
) -> Anything:
    """A group's accumulator [vkey, provider, sum, claims] (list Data; empty before its first
    escrow) with one more escrow: every escrow of a group has one provider key and address."""
    parts = un_list_data(acc)
    first = null_list(parts)
    rest = parts if first else tail_list(tail_list(parts))
    assert first or (
        equals_byte_string(un_b_data(head_list(parts)), vkey)
        and equals_data(head_list(tail_list(parts)), provider)
    ), "one provider per group"
    total = due if first else un_i_data(head_list(rest)) + due
    claims = parts if first else un_list_data(head_list(tail_list(rest)))
    empty = parts if first else tail_list(tail_list(rest))
    return list_data(
        mk_cons(
            b_data(vkey),
            mk_cons(
                provider,
                mk_cons(
                    i_data(total), mk_cons(list_data(mk_cons(ref, mk_cons(units, claims))), empty)
                ),
            ),
        )
    )


def add_claim(
    groups: Anything,
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
            head_list(groups), add_claim(tail_list(groups), g - 1, vkey, provider, due, ref, units)
        )
    return mk_cons(claimed(head_list(groups), vkey, provider, due, ref, units), tail_list(groups))


def empty_groups(specs: Anything) -> Anything:
    """One empty accumulator (list Data) per group of the redeemer."""
    if null_list(specs):
        return specs
    # a SettleGroup has three fields: dropping them leaves an empty builtin list
    empty = tail_list(tail_list(tail_list(fields(head_list(specs)))))
    return mk_cons(list_data(empty), empty_groups(tail_list(specs)))


def check_groups(
    groups: Anything,
    specs: Anything,
    outputs: Anything,
    previous: int,
    first_refund: int,
    network_id: int,
    settle_hash: bytes,
) -> None:
    """Each group's claim signed by its provider, and its sum paid in its output (outputs in
    increasing order, before the refunds: no output pays two groups or a group and a refund)."""
    if not null_list(specs):
        parts = un_list_data(head_list(groups))
        assert not null_list(parts), "a group without escrows"
        spec = fields(head_list(specs))
        vkey = un_b_data(head_list(parts))
        provider = head_list(tail_list(parts))
        total = un_i_data(head_list(tail_list(tail_list(parts))))
        claims = head_list(tail_list(tail_list(tail_list(parts))))
        note = un_b_data(head_list(spec))
        signature = un_b_data(head_list(tail_list(spec)))
        output = un_i_data(head_list(tail_list(tail_list(spec))))
        claim = Claim(b"UNCHAINED/claim/v1", network_id, settle_hash, note, claims)
        assert verify_ed25519_signature(vkey, serialise_data(claim), signature), "claim signature"
        if output >= 0:
            assert output > previous and output < first_refund, "provider output order"
            assert paid(index_access_list(outputs, output), provider, total), "provider payout"
            check_groups(
                tail_list(groups),
                tail_list(specs),
                outputs,
                output,
                first_refund,
                network_id,
                settle_hash,
            )
        else:
            assert total == 0, "provider payout"
            check_groups(
                tail_list(groups),
                tail_list(specs),
                outputs,
                previous,
                first_refund,
                network_id,
                settle_hash,
            )


def settle_escrows(
    inputs: Anything,
    items: Anything,
    groups: Anything,
    consumer: Anything,
    total: int,
    refunds: Anything,
    script: Anything,
    count: int,
    latest: int,
    tx: BatchTxInfo,
    specs: Anything,
    first_refund: int,
    network_id: int,
    settle_hash: bytes,
) -> None:
    """Walk the inputs from `inputs` on: `consumer`'s run is owed `total` so far, `refunds`
    are the outputs from its refund on, `count` escrows were seen (the first fixed `script`)."""
    if null_list(inputs):
        refund_run(refunds, consumer, total)
        assert null_list(items), "one item per escrow input"
        # one redeemer per escrow input and this one: no other Plutus script runs here
        redeemers = un_map_data(tx.redeemers)
        assert (
            count > 0
            and null_list(drop_list(redeemers, count + 1))
            and not null_list(drop_list(redeemers, count))
        ), "only escrows and this withdrawal"
        check_groups(
            groups, specs, un_list_data(tx.outputs), -1, first_refund, network_id, settle_hash
        )
    else:
        escrow = fields(head_list(inputs))
        out = fields(head_list(tail_list(escrow)))
        credential: Credential = head_list(fields(head_list(out)))
        if isinstance(credential, PubKeyCredential):  # a key's input (the fee's): no escrow
            settle_escrows(
                tail_list(inputs),
                items,
                groups,
                consumer,
                total,
                refunds,
                script,
                count,
                latest,
                tx,
                specs,
                first_refund,
                network_id,
                settle_hash,
            )
        else:
            script = credential if count == 0 else script
            # EscrowDatum's fields in one walk
            datum = fields(head_list(fields(head_list(tail_list(tail_list(out))))))
            escrow_consumer = head_list(datum)
            datum = tail_list(datum)
            provider = head_list(datum)
            datum = tail_list(datum)
            vkey = un_b_data(head_list(datum))
            datum = tail_list(datum)
            price = un_i_data(head_list(datum))
            datum = tail_list(datum)
            max_units = un_i_data(head_list(datum))
            datum = tail_list(datum)
            close = un_i_data(head_list(datum)) + un_i_data(head_list(tail_list(datum)))
            allowance = un_i_data(head_list(tail_list(tail_list(tail_list(datum)))))
            units_data = head_list(items)
            units = un_i_data(units_data)
            g = un_i_data(head_list(tail_list(items)))
            assert equals_data(credential, script), "one escrow script"
            assert units >= 0 and units <= max_units and price >= 0 and latest <= close, (
                "units or time"
            )
            due = price * units
            rest = lovelace(head_list(tail_list(out))) - due - allowance
            owed = rest if rest > 0 else 0
            same = equals_data(escrow_consumer, consumer)
            settle_escrows(
                tail_list(inputs),
                tail_list(tail_list(items)),
                add_claim(groups, g, vkey, provider, due, head_list(escrow), units_data),
                escrow_consumer,
                total + owed if same else owed,
                refunds if same else refund_run(refunds, consumer, total),
                script,
                count + 1,
                latest,
                tx,
                specs,
                first_refund,
                network_id,
                settle_hash,
            )


def validator(network_id: int, context: BatchContext) -> None:
    purpose = context.purpose
    assert isinstance(purpose, RewardingScript), "purpose"
    tx = context.transaction
    assert null_list(tail_list(un_map_data(tx.withdrawals))), "one withdrawal"
    upper = tx.validity_range.upper_bound.limit
    assert isinstance(upper, FinitePOSIXTime), "settle needs an upper bound"
    redeemer = fields(context.redeemer)
    specs = un_list_data(head_list(tail_list(redeemer)))
    first_refund = un_i_data(head_list(tail_list(tail_list(redeemer))))
    settle_escrows(
        un_list_data(tx.inputs),
        un_list_data(head_list(redeemer)),
        empty_groups(specs),
        i_data(0),  # no consumer yet: never an address
        0,
        drop_list(un_list_data(tx.outputs), first_refund),
        i_data(0),
        0,
        upper.time,
        tx,
        specs,
        first_refund,
        network_id,
        purpose.credential.credential_hash,
    )
