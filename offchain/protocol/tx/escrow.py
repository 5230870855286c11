"""Escrow transactions: lock, start, settle (one or a batch), refund and cancel.

Each returns an unsigned transaction (sign with `txbuild.sign_tx` or `Wallet.sign`) or raises
BuildError saying what is missing. Payouts are
tagged outputs placed at known indices; the split is `offchain.protocol.ledger.split`'s.
"""

from __future__ import annotations

import dataclasses

from pycardano import (
    Address,
    ChainContext,
    PaymentVerificationKey,
    PlutusData,
    Redeemer,
    Transaction,
    TransactionBuilder,
    TransactionId,
    TransactionInput,
    TransactionOutput,
    UTxO,
    VerificationKeyHash,
)

from offchain.chain.time import iso
from offchain.protocol.checks.acceptance import EscrowTerms
from offchain.protocol.ledger.addresses import from_plutus, to_plutus
from offchain.protocol.ledger.payloads import HASH_BYTES, VKEY_BYTES
from offchain.protocol.ledger.split import (
    lock_amount,
    refund_amount,
)
from offchain.protocol.ledger.types import (
    Cancel,
    EscrowDatum,
    PayoutKind,
    PubKeyCredential,
    Refund,
    Start,
)
from offchain.protocol.tx.deployment import Deployment
from offchain.protocol.tx.txbuild import (
    TTL_MS,
    BuildError,
    Clock,
    add_inputs,
    add_output,
    at_least_min_utxo,
    build,
    datum_cbor,
    datum_min_utxo,
    fee_inputs,
    ledger_inputs,
    new_builder,
    out_ref,
    payout,
    read_datum,
    script_source,
)

ESCROW_OUTPUT = 0  # a lock transaction's escrow output


def lock_escrow(lock: TransactionId) -> TransactionInput:
    """The escrow the lock transaction `lock` makes: its output ESCROW_OUTPUT."""
    return TransactionInput(lock, ESCROW_OUTPUT)


def new_escrow(
    consumer: Address,
    provider: Address,
    provider_vkey: bytes,
    price_per_unit: int,
    max_units: int,
    deadline: int,
    settle_window: int,
    job_id: bytes,
    fee_allowance: int,
    start_deadline: int = 0,
) -> EscrowDatum:
    """The datum for a job: full addresses, so payouts go exactly where each party said;
    `start_deadline` (0: none) the time by which the provider must Start it."""
    return EscrowDatum(
        to_plutus(consumer),
        to_plutus(provider),
        provider_vkey,
        price_per_unit,
        max_units,
        deadline,
        settle_window,
        job_id,
        fee_allowance,
        start_deadline,
    )


def check_escrow(datum: EscrowDatum, lovelace: int, now_ms: int, deposit: int) -> None:
    """Refuse an escrow that could not be settled as agreed (the validators check less)."""
    problems = []
    if len(datum.provider_vkey) != VKEY_BYTES:
        problems.append(f"provider_vkey must be {VKEY_BYTES} bytes")
    if len(datum.job_id) != HASH_BYTES:
        problems.append(f"job_id must be {HASH_BYTES} bytes")
    if min(datum.price_per_unit, datum.max_units, datum.fee_allowance) < 0:
        problems.append("price, max units and fee allowance must not be negative")
    if datum.settle_window <= 0:
        problems.append("the settle window must be positive")
    if datum.deadline <= now_ms:
        problems.append(f"the deadline {iso(datum.deadline)} has passed")
    if datum.start_deadline < 0 or 0 < datum.start_deadline <= now_ms:
        problems.append("the start deadline must be 0 (none) or in the future")
    elif datum.start_deadline >= datum.deadline:
        problems.append("the start deadline must come before the deadline")
    needed = lock_amount(datum.price_per_unit, datum.max_units, datum.fee_allowance, deposit)
    if lovelace < needed:
        problems.append(
            f"{lovelace} lovelace cannot pay max units, the fee and the return deposit ({needed})"
        )
    if problems:
        raise BuildError("; ".join(problems))


def lock(
    context: ChainContext,
    deployment: Deployment,
    consumer: Address,
    datum: EscrowDatum,
    lovelace: int,
) -> Transaction:
    """Lock `lovelace` (and nothing else: the validators count lovelace only) from the
    `consumer`'s address for a job; the escrow is output ESCROW_OUTPUT, staked like the
    consumer's own address. The consumer signs it."""
    deposit = refund_deposit(context, deployment, datum.consumer)
    check_escrow(datum, lovelace, Clock.now(context).tip_ms, deposit)
    output = escrow_output(context, deployment, datum, lovelace)
    builder = new_builder(context)
    builder.add_input_address(consumer)
    builder.add_output(output)
    return build(builder, consumer)


def escrow_output(
    context: ChainContext, deployment: Deployment, datum: EscrowDatum, lovelace: int
) -> TransactionOutput:
    """The escrow output a lock places: `lovelace` raised to its min-UTxO, staked like the
    consumer's own address."""
    stake = from_plutus(datum.consumer, deployment.network)
    output = TransactionOutput(deployment.escrow_address(stake), 0, datum=datum)
    output.amount.coin = at_least_min_utxo(context, output, lovelace)
    return output


def escrow_datum(deployment: Deployment, escrow: UTxO) -> EscrowDatum:
    """The datum of an escrow UTxO; raises BuildError for anything else."""
    return read_datum(escrow, EscrowDatum, deployment.escrow_hash, "escrow")


def refund_deposit(context: ChainContext, deployment: Deployment, consumer: PlutusData) -> int:
    """The return deposit a lock for `consumer` (a Plutus address) adds: the ledger's minimum
    for its refund output, so a settle's refund never falls below it at any unit count and
    nobody ever tops one up (the renter gets it back with the refund)."""
    to = from_plutus(consumer, deployment.network)
    return at_least_min_utxo(context, TransactionOutput(to, 0), 0)


def lock_lovelace(
    context: ChainContext, deployment: Deployment, datum: EscrowDatum, encoded: bytes | None = None
) -> int:
    """What a lock of `datum` holds: the whole job, its fee allowance and the return deposit
    (`lock_amount`), raised to the escrow output's own minimum UTxO (a cheap job's sum is below
    it). All of it but the job's price and the allowance comes back to the consumer. `encoded`:
    the datum's `datum_cbor` where the caller has it (a quote hashes it), not encoded again."""
    deposit = refund_deposit(context, deployment, datum.consumer)
    needed = lock_amount(datum.price_per_unit, datum.max_units, datum.fee_allowance, deposit)
    address = deployment.escrow_address(from_plutus(datum.consumer, deployment.network))
    least = datum_min_utxo(context, address, datum_cbor(datum) if encoded is None else encoded)
    return max(needed, least)


def acceptance_terms(
    context: ChainContext,
    deployment: Deployment,
    datum: EscrowDatum,
    locked: int,
    now_ms: int,
    bond_covers_before: int | None,
    settle_fee_share: int = 0,
) -> EscrowTerms:
    """An escrow of `datum` holding `locked`, as the acceptance check reads it at `now_ms`."""
    return EscrowTerms(
        price_per_unit=datum.price_per_unit, max_units=datum.max_units,
        deadline_ms=datum.deadline, close_ms=datum.close, fee_allowance=datum.fee_allowance,
        locked=locked, now_ms=now_ms,
        refund_deposit=refund_deposit(context, deployment, datum.consumer),
        refund_window_ms=deployment.refund_window_ms, bond_covers_before=bond_covers_before,
        settle_fee_share=settle_fee_share,
    )  # fmt: skip


def refundable_after(datum: EscrowDatum) -> int:
    """The POSIX ms after which a Refund of an escrow of `datum` is valid: its start deadline
    while it has one (not started: its consumer's alone), else its close."""
    if datum.start_deadline > 0:
        return min(datum.start_deadline, datum.close)
    return datum.close


def start(
    context: ChainContext, deployment: Deployment, escrow: UTxO, provider: Address
) -> Transaction:
    """Show the job of `escrow` started, before its start deadline: the escrow goes on at its
    address with its value and the datum without the start deadline (`EscrowDatum.started`),
    so the consumer can no longer refund it early. The provider key signs; `provider` (its
    wallet) pays the fee from inputs of its own: nothing leaves the escrow. The new escrow is
    output ESCROW_OUTPUT."""
    datum = escrow_datum(deployment, escrow)
    if datum.start_deadline == 0:
        raise BuildError(f"escrow {out_ref(escrow)} has no start deadline (or has started)")
    clock = Clock.now(context)
    ttl = clock.ttl_until(datum.start_deadline)
    if ttl <= clock.tip_slot:
        raise BuildError(
            f"escrow {out_ref(escrow)}: its start deadline {iso(datum.start_deadline)} has passed"
        )
    builder = new_builder(context)
    fee = fee_inputs(context, provider)
    own = ledger_inputs([escrow], fee).index(escrow.input)
    output = TransactionOutput(escrow.output.address, escrow.output.amount, datum=datum.started)
    index = add_output(builder, output)
    builder.add_script_input(
        escrow,
        script=script_source(builder, deployment.escrow_ref),
        redeemer=Redeemer(Start(own, index)),
    )
    builder.required_signers = [PaymentVerificationKey(datum.provider_vkey).hash()]
    builder.ttl = ttl
    add_inputs(builder, fee)
    return build(builder, provider)


def started_escrow(start_tx: TransactionId) -> TransactionInput:
    """The escrow a Start transaction continues: its output ESCROW_OUTPUT."""
    return TransactionInput(start_tx, ESCROW_OUTPUT)


def started_utxo(
    context: ChainContext, deployment: Deployment, datum: EscrowDatum, lovelace: int
) -> UTxO | None:
    """The unspent escrow a Start of an escrow of `datum` holding `lovelace` left, if any: at
    the escrow address staked like the consumer, `datum.started`, the same lovelace (a Start
    moves none). Where the job's money is once its provider started it; anyone could lock a
    look-alike there, which would only pay this consumer more."""
    stake = from_plutus(datum.consumer, deployment.network)
    want = datum.started
    for utxo in context.utxos(deployment.escrow_address(stake)):
        if utxo.output.amount.coin != lovelace:
            continue
        try:
            if escrow_datum(deployment, utxo) == want:
                return utxo
        except BuildError:
            continue
    return None


def add_refund(
    context: ChainContext,
    builder: TransactionBuilder,
    deployment: Deployment,
    escrow: UTxO,
    clock: Clock,
    inputs: list[TransactionInput],
    submitter: Address,
) -> EscrowDatum:
    """Spend `escrow` with Refund into `builder` (used alone and by the bond's slash);
    `inputs` are all the transaction's inputs in ledger order. Before the close (an escrow
    not started by its start deadline) and within the refund window after it only the
    consumer may refund: then `submitter` must be the consumer, who signs."""
    datum = escrow_datum(deployment, escrow)
    first = clock.first_slot_after(refundable_after(datum))
    if clock.tip_slot < first:
        what = "its start deadline" if datum.start_deadline > 0 else "deadline + window"
        raise BuildError(
            f"escrow {out_ref(escrow)} not yet past {what}: refundable at {clock.iso_slot(first)}"
        )
    consumer = from_plutus(datum.consumer, deployment.network)
    open_to_all = clock.first_slot_after(datum.close + deployment.refund_window_ms)
    if clock.tip_slot < open_to_all:
        if submitter.payment_part != consumer.payment_part or not isinstance(
            consumer.payment_part, VerificationKeyHash
        ):
            raise BuildError(
                f"until {clock.iso_slot(open_to_all)} only the consumer {consumer} may refund "
                f"escrow {out_ref(escrow)} (and slash the bond with it)"
            )
        builder.required_signers = [consumer.payment_part]
    owed = refund_amount(escrow.output.amount.coin, datum.fee_allowance)
    index = add_output(builder, payout(context, consumer, owed, PayoutKind.REFUND, escrow.input))
    builder.add_script_input(
        escrow,
        script=script_source(builder, deployment.escrow_ref),
        redeemer=Redeemer(Refund(inputs.index(escrow.input), index)),
    )
    builder.validity_start = clock.tip_slot
    return datum


def refund(
    context: ChainContext,
    deployment: Deployment,
    escrow: UTxO,
    submitter: Address,
    valid_from: int | None = None,
) -> Transaction:
    """Return an unsettled escrow to its consumer after deadline + window: the consumer, and
    once the refund window is over too anyone (the submitter pays the fee, keeps the
    allowance's rest and signs). `valid_from`: a later slot the refund is built for ahead of
    time (the first past its start deadline or close, `Clock.first_slot_after`), so it can be
    submitted the moment the chain's tip reaches it; valid for TTL_MS from there."""
    clock = Clock.now(context)
    if valid_from is not None:
        clock = dataclasses.replace(clock, tip_slot=max(clock.tip_slot, valid_from))
    builder = new_builder(context)
    fee = fee_inputs(context, submitter)
    inputs = ledger_inputs([escrow], fee)
    add_refund(context, builder, deployment, escrow, clock, inputs, submitter)
    builder.ttl = clock.ttl_until(clock.tip_ms + TTL_MS)
    add_inputs(builder, fee)
    return build(builder, submitter)


def cancel(
    context: ChainContext, deployment: Deployment, escrow: UTxO, payer: Address
) -> Transaction:
    """Return an escrow to its consumer at any time. Consumer and provider must both sign
    (each in its own process: `sign_tx` adds to the witnesses there are); `payer` pays the
    fee, usually the consumer."""
    datum = escrow_datum(deployment, escrow)
    if not isinstance(datum.consumer.payment, PubKeyCredential):
        raise BuildError("the consumer address is a script: it cannot sign a cancel")
    consumer_hash = VerificationKeyHash(datum.consumer.payment.hash)
    provider_hash = PaymentVerificationKey(datum.provider_vkey).hash()
    builder = new_builder(context)
    fee = fee_inputs(context, payer)
    own = ledger_inputs([escrow], fee).index(escrow.input)
    to = from_plutus(datum.consumer, deployment.network)
    owed = refund_amount(escrow.output.amount.coin, datum.fee_allowance)
    index = add_output(builder, payout(context, to, owed, PayoutKind.CANCEL, escrow.input))
    builder.add_script_input(
        escrow,
        script=script_source(builder, deployment.escrow_ref),
        redeemer=Redeemer(Cancel(own, index)),
    )
    builder.required_signers = [consumer_hash, provider_hash]
    add_inputs(builder, fee)
    return build(builder, payer)
