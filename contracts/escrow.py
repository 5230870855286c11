"""Escrow validator (PROTOCOL.md): spends escrow UTxOs; the settle script settles a batch.

Parameters: settle_hash, refund_window_ms. Spending with Settle only asks that the settle
script withdraws (the transaction's one withdrawal), whose run checks every escrow input of
the transaction at once: each spend costs the same whatever the batch. For refund_window_ms
after the close only the consumer may refund (and slash with it). An escrow with a start
deadline (its datum's tenth field) is Started by its provider before it, or refunded early by
its consumer after it.

Shaped for cost under OpShin 0.28 (see contracts/simplify.py for the rest): every `if`
statement passes all live locals to a continuation and every call passes the globals the
callee uses, so functions are few and checks are `assert`s over `and` chains; inputs and
outputs are reached by index, each list (and each record's field list) is walked once, and
OpShin's typed lists, which copy on every read, are avoided on the hot path.
"""

from opshin.prelude import *
from opshin.std.builtins import *

from contracts.onchain import *


def start_deadline(datum: Anything) -> int:
    """The escrow's start deadline: its datum's tenth field when it has one and it is positive,
    else 0 (none: a deadline-less or started escrow)."""
    rest = drop_list(fields(datum), 9)
    deadline = 0 if null_list(rest) else un_i_data(head_list(rest))
    return deadline if deadline > 0 else 0


def all_but_last(xs: Anything) -> Anything:
    """The builtin list `xs` without its last element."""
    rest = tail_list(xs)
    return rest if null_list(rest) else mk_cons(head_list(xs), all_but_last(rest))


def start(tx: TxInfoV3, purpose: SpendingScript, own: InputV3, redeemer: Start):
    """The provider shows the job started, in time: the escrow goes on unchanged but for its
    start deadline, dropped. It runs alone, so no other escrow's Start counts its output."""
    datum: EscrowDatum = purpose.datum.datum
    start_by = start_deadline(purpose.datum.datum)
    upper = tx.validity_range.upper_bound.limit
    assert start_by > 0, "no start deadline"
    assert isinstance(upper, FinitePOSIXTime), "start needs an upper bound"
    assert upper.time <= start_by, "start after the start deadline"
    assert blake2b_224(datum.provider_vkey) in tx.signatories, "provider must sign"
    assert len(tx.redeemers) == 1, "start runs alone"
    out: InlineTxOut = index_access_list(un_list_data(tx.outputs), redeemer.output)
    resolved = own.resolved
    kept: List[Anything] = list_data(all_but_last(fields(purpose.datum.datum)))
    assert (
        out.address == resolved.address
        and equals_data(out.value, resolved.value)
        and equals_data(out.datum.datum, constr_data(0, kept))
        and equals_data(out.reference_script, resolved.reference_script)
    ), "continuing escrow"


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
        if lower.time > close:
            assert consumer_signs or lower.time > close + refund_window_ms, (
                "only the consumer refunds in the refund window"
            )
        else:
            # early: only an escrow not started by its start deadline, only by its consumer
            start_by = start_deadline(purpose.datum.datum)
            assert start_by > 0, "refund before close"
            assert lower.time > start_by, "refund before the start deadline"
            assert consumer_signs, "only the consumer refunds an escrow not started"
    else:
        assert consumer_signs, "consumer signs"
        assert blake2b_224(datum.provider_vkey) in signers, "provider must sign"
    out: InlineTxOut = index_access_list(un_list_data(tx.outputs), redeemer.consumer_output)
    assert out.address == datum.consumer, "payout address"
    assert lovelace(out.value) >= lovelace(own.resolved.value) - datum.fee_allowance, "amount"
    assert out.datum == SomeOutputDatum(Payout(redeemer.CONSTR_ID, purpose.tx_out_ref)), "tag"


def validator(settle_hash: bytes, refund_window_ms: int, context: ScriptContextV3) -> None:
    purpose = context.purpose
    assert isinstance(purpose, SpendingScript), "purpose"
    tx = context.transaction
    redeemer: EscrowRedeemer = context.redeemer
    if isinstance(redeemer, Settle):
        # the settle script refuses a transaction with any other withdrawal
        withdrawals = un_map_data(tx.withdrawals)
        assert not null_list(withdrawals) and equals_data(
            fst_pair(head_list(withdrawals)), ScriptCredential(settle_hash)
        ), "settle needs the batch withdrawal"
    else:
        own: InputV3 = head_list(skip_list(un_list_data(tx.inputs), redeemer.own_input))
        assert own.out_ref == purpose.tx_out_ref, "own_input is not the spent escrow"
        if isinstance(redeemer, Start):
            start(tx, purpose, own, redeemer)
        else:
            pay_back(refund_window_ms, tx, purpose, own, redeemer)
