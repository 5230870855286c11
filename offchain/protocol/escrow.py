"""Escrow transactions: lock, settle (one or a batch), refund and cancel.

Each returns an unsigned transaction (sign with `txbuild.sign_tx` or `Wallet.sign`) or raises
BuildError saying what is missing. Payouts are
tagged outputs placed at known indices; the split is `offchain.protocol.split`'s.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Hashable, Sequence

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
    Withdrawals,
)

from offchain.chain.context import queries
from offchain.chain.time import iso
from offchain.chain.utxo import format_out_ref
from offchain.protocol.acceptance import EscrowTerms
from offchain.protocol.addresses import from_plutus, to_plutus
from offchain.protocol.budgets import ExecutionBudgets
from offchain.protocol.deployment import Deployment
from offchain.protocol.payloads import HASH_BYTES, VKEY_BYTES
from offchain.protocol.receipt import Receipt
from offchain.protocol.split import (
    SettleSplit,
    lock_amount,
    refund_amount,
    settle_split,
    worst_settle_topup,
)
from offchain.protocol.txbuild import (
    BuildError,
    Clock,
    add_inputs,
    add_output,
    at_least_min_utxo,
    build,
    fee_inputs,
    ledger_inputs,
    ledger_key,
    new_builder,
    out_ref,
    payout,
    read_datum,
    script_source,
)
from offchain.protocol.types import (
    BatchSettle,
    Cancel,
    EscrowDatum,
    PayoutKind,
    PubKeyCredential,
    Refund,
    Settle,
    SettleItem,
)

ESCROW_OUTPUT = 0  # a lock transaction's escrow output
ToSettle = tuple[UTxO, Receipt]  # a receipt beside the escrow UTxO it names, which settle spends


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
) -> EscrowDatum:
    """The datum for a job: full addresses, so payouts go exactly where each party said."""
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
    )


def check_escrow(datum: EscrowDatum, lovelace: int, now_ms: int) -> None:
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
    needed = lock_amount(datum.price_per_unit, datum.max_units, datum.fee_allowance)
    if lovelace < needed:
        problems.append(f"{lovelace} lovelace cannot pay max units and the fee ({needed})")
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
    check_escrow(datum, lovelace, Clock.now(context).tip_ms)
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


def settle(
    context: ChainContext,
    deployment: Deployment,
    receipts: Sequence[ToSettle],
    submitter: Address,
    budgets: ExecutionBudgets | None = None,
    busy: Collection[TransactionInput] = (),
) -> Transaction:
    """Settle one or many escrows in one transaction (withdraw-zero does the shared work).

    The provider of each gets price x units, the consumer the rest less the fee allowance;
    what the allowances leave after the fee goes to the submitter as change (the submitter
    pays the fee up front from its address and signs). With `budgets` (kept by a submitter that
    settles often), a batch of a shape already evaluated declares its execution units and
    skips evaluateTransaction: the node runs the scripts once, on submit. The fee is paid
    from the submitter's UTxOs outside `busy` (its settlements in flight spend those).
    """
    if not receipts:
        raise BuildError("nothing to settle: no receipts")
    if len({escrow.input for escrow, _ in receipts}) != len(receipts):
        raise BuildError("two receipts for one escrow")
    budgets = budgets if budgets is not None else ExecutionBudgets()
    clock = Clock.now(context)
    builder = new_builder(context)
    fee = fee_inputs(context, submitter, busy=busy)
    inputs = ledger_inputs([escrow for escrow, _ in receipts], fee)
    ordered = sorted(receipts, key=lambda pair: ledger_key(pair[0]))
    items = []
    closes = []
    for escrow, receipt in ordered:
        datum = _check_receipt(deployment, escrow, receipt)
        closes.append(datum.close)
        items.append(_add_settle_outputs(context, builder, deployment, escrow, receipt, datum))
    # A spend's cost depends on its input's index, the batch's on the transaction's size.
    own = [inputs.index(escrow.input) for escrow, _ in ordered]
    keyed: list[tuple[Hashable, PlutusData]] = [
        (("settle-spend", index), Settle(index)) for index in own
    ]
    keyed.append((("settle-batch", len(inputs), len(builder.outputs)), BatchSettle(items)))
    redeemers = budgets.redeemers(keyed)
    for (escrow, _), redeemer in zip(ordered, redeemers, strict=False):
        source = script_source(builder, deployment.escrow_ref)
        builder.add_script_input(escrow, script=source, redeemer=redeemer)
    builder.ttl = clock.ttl_until(min(closes))
    if builder.ttl <= clock.tip_slot + 1:
        raise BuildError(f"the settle window closed at {iso(min(closes))}")
    balance = reward_balance(context, deployment)
    builder.withdrawals = Withdrawals({bytes(deployment.reward_address): balance})
    builder.add_withdrawal_script(
        script_source(builder, deployment.escrow_ref), redeemer=redeemers[-1]
    )
    add_inputs(builder, fee)
    tx = build(builder, submitter)
    budgets.learn([key for key, _ in keyed], redeemers)
    return tx


def reward_balance(context: ChainContext, deployment: Deployment) -> int:
    """The escrow script's reward account balance: a settle's withdrawal must take all of it
    (the ledger refuses any other amount), which goes to the submitter as change. Zero unless
    someone paid into it (a returned deposit names any reward account it likes)."""
    balance = queries(context).script_reward_balance(deployment.escrow_hash)
    if balance is None:
        raise BuildError(
            "the escrow script's stake credential is not registered: deploy registers it"
        )
    return balance


def _check_receipt(deployment: Deployment, escrow: UTxO, receipt: Receipt) -> EscrowDatum:
    if receipt.escrow != escrow.input:
        named = format_out_ref(receipt.escrow)
        raise BuildError(f"the receipt is for {named}, not {out_ref(escrow)}")
    datum = escrow_datum(deployment, escrow)
    if not receipt.signed_by(datum.provider_vkey, deployment.network_id, deployment.escrow_hash):
        raise BuildError(
            f"the receipt for {out_ref(escrow)} is not signed by the escrow's provider key"
        )
    return datum


def _add_settle_outputs(
    context: ChainContext,
    builder: TransactionBuilder,
    deployment: Deployment,
    escrow: UTxO,
    receipt: Receipt,
    datum: EscrowDatum,
) -> SettleItem:
    """The payouts of the parties owed anything, and the item naming them (an index the
    validator does not read, for a party owed nothing, is 0)."""
    payouts = settle_payouts(context, deployment, escrow, receipt.units, datum)
    provider_output = 0 if payouts.provider is None else add_output(builder, payouts.provider)
    consumer_output = 0 if payouts.consumer is None else add_output(builder, payouts.consumer)
    return SettleItem(
        receipt.units, receipt.result_hash, receipt.evidence_hash, receipt.signature,
        provider_output, consumer_output,
    )  # fmt: skip


@dataclasses.dataclass(frozen=True)
class SettlePayouts:
    """One escrow's payouts as a settle places them: the split, the provider's output and the
    consumer's (each None when its party is owed nothing: a zero-unit receipt pays no
    provider output)."""

    split: SettleSplit
    provider: TransactionOutput | None
    consumer: TransactionOutput | None

    @property
    def topup(self) -> int:
        """What the settler adds to raise them to the ledger's minimum UTxO."""
        paid = sum(out.amount.coin for out in (self.provider, self.consumer) if out is not None)
        return paid - self.split.provider - self.split.consumer


def settle_payouts(
    context: ChainContext,
    deployment: Deployment,
    escrow: UTxO,
    units: int,
    datum: EscrowDatum | None = None,
) -> SettlePayouts:
    """The payouts a settle of a receipt for `units` at `escrow` places (tagged, at the
    parties' own addresses)."""
    datum = datum or escrow_datum(deployment, escrow)
    try:
        split = settle_split(
            escrow.output.amount.coin, datum.price_per_unit, units, datum.max_units,
            datum.fee_allowance,
        )  # fmt: skip
    except ValueError as exc:
        raise BuildError(f"cannot settle {out_ref(escrow)}: {exc}") from exc
    ref = escrow.input
    provider = from_plutus(datum.provider, deployment.network)
    consumer = from_plutus(datum.consumer, deployment.network)
    return SettlePayouts(
        split,
        payout(context, provider, split.provider, PayoutKind.SETTLE, ref)
        if split.provider > 0 else None,
        payout(context, consumer, split.consumer, PayoutKind.SETTLE, ref)
        if split.consumer > 0 else None,
    )  # fmt: skip


def worst_topup(
    context: ChainContext, deployment: Deployment, datum: EscrowDatum, locked: int
) -> int:
    """The most a settle of a lock of `datum` holding `locked` (its escrow at ESCROW_OUTPUT)
    can need added to its payouts, over every unit count a receipt may name: each payout's
    min-UTxO is its real output's (tag, address)."""
    provider, consumer = payout_minimums(context, deployment, datum)
    return worst_settle_topup(
        locked, datum.price_per_unit, datum.max_units, datum.fee_allowance, provider, consumer
    )


def payout_minimums(
    context: ChainContext, deployment: Deployment, datum: EscrowDatum
) -> tuple[int, int]:
    """The ledger's minimum lovelace of a settle's provider and consumer payouts (their real
    outputs: address and tag) for an escrow of `datum`."""
    ref = lock_escrow(TransactionId(bytes(HASH_BYTES)))
    provider, consumer = (
        payout(context, from_plutus(party, deployment.network), 0, PayoutKind.SETTLE, ref)
        for party in (datum.provider, datum.consumer)
    )
    return provider.amount.coin, consumer.amount.coin


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
    provider_min, consumer_min = payout_minimums(context, deployment, datum)
    return EscrowTerms(
        price_per_unit=datum.price_per_unit, max_units=datum.max_units,
        deadline_ms=datum.deadline, close_ms=datum.close, fee_allowance=datum.fee_allowance,
        locked=locked, now_ms=now_ms, provider_min_utxo=provider_min,
        consumer_min_utxo=consumer_min, refund_window_ms=deployment.refund_window_ms,
        bond_covers_before=bond_covers_before, settle_fee_share=settle_fee_share,
    )  # fmt: skip


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
    `inputs` are all the transaction's inputs in ledger order. Within the refund window
    after the close only the consumer may refund: then `submitter` must be the consumer,
    who signs."""
    datum = escrow_datum(deployment, escrow)
    first = clock.first_slot_after(datum.close)
    if clock.tip_slot < first:
        raise BuildError(
            f"escrow {out_ref(escrow)} not yet past deadline + window: "
            f"refundable at {clock.iso_slot(first)}"
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
    context: ChainContext, deployment: Deployment, escrow: UTxO, submitter: Address
) -> Transaction:
    """Return an unsettled escrow to its consumer after deadline + window: the consumer, and
    once the refund window is over too anyone (the submitter pays the fee, keeps the
    allowance's rest and signs)."""
    builder = new_builder(context)
    fee = fee_inputs(context, submitter)
    inputs = ledger_inputs([escrow], fee)
    add_refund(context, builder, deployment, escrow, Clock.now(context), inputs, submitter)
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
