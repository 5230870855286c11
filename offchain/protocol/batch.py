"""Batch settle: many escrows, of many providers and consumers, in one transaction.

The settle script's withdrawal checks every escrow input (PROTOCOL.md). Each claim (a receipt
is a claim on one escrow) is a group, paid in one output to its provider holding the sum its
escrows earn; each run of escrows of one consumer (adjacent in ledger order) is refunded in
one output. Payouts carry no datum. A party's payout is never topped up by the settler: a
provider total below the ledger's minimum UTxO waits for a later batch (`SmallPayout`),
unless the provider settles it itself (its own change raises its own output), and a
consumer's refund always holds the return deposit its lock added (`escrow.refund_deposit`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Hashable, Sequence

from pycardano import (
    Address,
    ChainContext,
    PlutusData,
    Transaction,
    TransactionBuilder,
    TransactionInput,
    TransactionOutput,
    UTxO,
    Withdrawals,
)

from offchain.chain.context import queries
from offchain.chain.time import iso
from offchain.chain.utxo import format_out_ref
from offchain.protocol.addresses import from_plutus
from offchain.protocol.budgets import ExecutionBudgets
from offchain.protocol.claim import Claim
from offchain.protocol.deployment import Deployment
from offchain.protocol.escrow import escrow_datum
from offchain.protocol.receipt import Receipt
from offchain.protocol.split import SettleSplit, settle_split
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
    script_source,
)
from offchain.protocol.types import BatchSettle, EscrowDatum, Settle, SettleGroup

ToSettle = tuple[UTxO, Receipt]  # a receipt beside the escrow UTxO it names
ClaimToSettle = tuple[Sequence[UTxO], Claim]  # a claim beside the escrow UTxOs it names


class SmallPayout(BuildError):
    """A provider's total in this batch is below the ledger's minimum UTxO: it waits."""


@dataclasses.dataclass(frozen=True)
class Escrow:
    utxo: UTxO
    datum: EscrowDatum
    split: SettleSplit
    units: int


@dataclasses.dataclass(frozen=True)
class Group:
    """One claim, checked: its escrows, all of one provider (key and address)."""

    claim: Claim
    escrows: list[Escrow]

    @property
    def provider(self) -> PlutusData:
        return self.escrows[0].datum.provider

    @property
    def vkey(self) -> bytes:
        return self.escrows[0].datum.provider_vkey

    @property
    def total(self) -> int:
        return sum(escrow.split.provider for escrow in self.escrows)


def payout_minimum(context: ChainContext, to: Address) -> int:
    """The ledger's minimum lovelace of a settle payout (no datum) to `to`."""
    return at_least_min_utxo(context, TransactionOutput(to, 0), 0)


def settle(
    context: ChainContext,
    deployment: Deployment,
    receipts: Sequence[ToSettle],
    submitter: Address,
    budgets: ExecutionBudgets | None = None,
    busy: Collection[TransactionInput] = (),
    claims: Sequence[ClaimToSettle] = (),
) -> Transaction:
    """Settle escrows by their receipts and claims in one transaction.

    Each provider gets price x units, each consumer the rest less the fee allowance; what the
    allowances leave after the fee goes to the submitter as change (the submitter pays the fee
    up front from its address and signs). With `budgets` (kept by a submitter that settles
    often), a batch of a shape already evaluated declares its execution units and skips
    evaluateTransaction. The fee is paid from the submitter's UTxOs outside `busy`.
    """
    named = [([escrow], Claim.of_receipt(receipt)) for escrow, receipt in receipts]
    groups = [_group(deployment, utxos, claim) for utxos, claim in [*named, *claims]]
    if not groups:
        raise BuildError("nothing to settle: no receipts")
    every = [escrow for group in groups for escrow in group.escrows]
    if len({escrow.utxo.input for escrow in every}) != len(every):
        raise BuildError("two claims for one escrow")
    groups.sort(key=lambda group: -len(group.escrows))  # the largest costs least at index 0
    budgets = budgets if budgets is not None else ExecutionBudgets()
    clock = Clock.now(context)
    builder = new_builder(context)
    specs = [_pay_provider(context, builder, deployment, group, submitter) for group in groups]
    first_refund = len(builder.outputs)
    ordered = sorted(every, key=lambda escrow: ledger_key(escrow.utxo))
    _refund_consumers(context, builder, deployment, ordered)
    group_of = {e.utxo.input: g for g, group in enumerate(groups) for e in group.escrows}
    items = [n for e in ordered for n in (e.units, group_of[e.utxo.input])]
    fee = fee_inputs(context, submitter, busy=busy)
    inputs = ledger_inputs([escrow.utxo for escrow in ordered], fee)
    # every spend costs the same; the batch's cost depends on its shape, the escrows' places
    # among the inputs included (a key input before them costs the script more, not the same)
    place = {ref: index for index, ref in enumerate(inputs)}
    places = tuple(place[escrow.utxo.input] for escrow in ordered)
    shape = ("settle-batch", len(inputs), len(builder.outputs), tuple(items[1::2]), places)
    keyed: list[tuple[Hashable, PlutusData]] = [(("settle-spend",), Settle()) for _ in ordered]
    keyed.append((shape, BatchSettle(items, specs, first_refund)))
    redeemers = budgets.redeemers(keyed)
    for escrow, redeemer in zip(ordered, redeemers, strict=False):
        source = script_source(builder, deployment.escrow_ref)
        builder.add_script_input(escrow.utxo, script=source, redeemer=redeemer)
    close = min(escrow.datum.close for escrow in ordered)
    builder.ttl = clock.ttl_until(close)
    if builder.ttl <= clock.tip_slot + 1:
        raise BuildError(f"the settle window closed at {iso(close)}")
    builder.withdrawals = Withdrawals(
        {bytes(deployment.reward_address): reward_balance(context, deployment)}
    )
    builder.add_withdrawal_script(
        script_source(builder, deployment.settle_ref), redeemer=redeemers[-1]
    )
    add_inputs(builder, fee)
    tx = build(builder, submitter)
    budgets.learn([key for key, _ in keyed], redeemers)
    return tx


def reward_balance(context: ChainContext, deployment: Deployment) -> int:
    """The settle script's reward account balance: a settle's withdrawal must take all of it
    (the ledger refuses any other amount), which goes to the submitter as change. Zero unless
    someone paid into it (a returned deposit names any reward account it likes)."""
    balance = queries(context).script_reward_balance(deployment.settle_hash)
    if balance is None:
        raise BuildError(
            "the settle script's stake credential is not registered: deploy registers it"
        )
    return balance


def _group(deployment: Deployment, utxos: Sequence[UTxO], claim: Claim) -> Group:
    """The claim's escrows, checked as the settle script will: one provider, its signature."""
    by_ref = {utxo.input: utxo for utxo in utxos}
    if set(by_ref) != set(claim.units):
        named = ", ".join(sorted(format_out_ref(ref) for ref in claim.units))
        raise BuildError(f"the claim names {named}: give exactly those escrows")
    escrows = []
    for ref, units in claim.units.items():
        utxo = by_ref[ref]
        datum = escrow_datum(deployment, utxo)
        try:
            split = settle_split(
                utxo.output.amount.coin, datum.price_per_unit, units, datum.max_units,
                datum.fee_allowance,
            )  # fmt: skip
        except ValueError as exc:
            raise BuildError(f"cannot settle {out_ref(utxo)}: {exc}") from exc
        escrows.append(Escrow(utxo, datum, split, units))
    first = escrows[0].datum
    if any(
        (e.datum.provider_vkey, e.datum.provider) != (first.provider_vkey, first.provider)
        for e in escrows
    ):
        raise BuildError("a claim covers escrows of one provider key and address only")
    if not claim.signed_by(first.provider_vkey, deployment.network_id, deployment.settle_hash):
        refs = ", ".join(out_ref(e.utxo) for e in escrows)
        raise BuildError(f"the claim on {refs} is not signed by the escrows' provider key")
    return Group(claim, escrows)


def _pay_provider(
    context: ChainContext,
    builder: TransactionBuilder,
    deployment: Deployment,
    group: Group,
    submitter: Address,
) -> SettleGroup:
    """The group's payout (none when its escrows earn nothing) and its redeemer entry."""
    if group.total == 0:
        return SettleGroup(group.claim.note, group.claim.signature, -1, group.vkey)
    to = from_plutus(group.provider, deployment.network)
    output = TransactionOutput(to, group.total)
    least = at_least_min_utxo(context, output, group.total)
    if least > group.total and submitter.payment_part != to.payment_part:
        refs = ", ".join(out_ref(e.utxo) for e in group.escrows)
        raise SmallPayout(
            f"{to} earns {group.total} lovelace for {refs}, less than the ledger's minimum "
            f"UTxO ({least}): it waits for a later batch, or its provider settles it"
        )
    output.amount.coin = least  # a provider settling itself raises its own output
    index = add_output(builder, output)
    return SettleGroup(group.claim.note, group.claim.signature, index, group.vkey)


def _refund_consumers(
    context: ChainContext,
    builder: TransactionBuilder,
    deployment: Deployment,
    ordered: Sequence[Escrow],
) -> None:
    """One refund per run of one consumer's escrows (adjacent in ledger order) owed anything."""
    runs: list[tuple[PlutusData, int]] = []
    for escrow in ordered:
        if runs and runs[-1][0] == escrow.datum.consumer:
            runs[-1] = (escrow.datum.consumer, runs[-1][1] + escrow.split.consumer)
        else:
            runs.append((escrow.datum.consumer, escrow.split.consumer))
    for consumer, owed in runs:
        if owed == 0:
            continue
        output = TransactionOutput(from_plutus(consumer, deployment.network), owed)
        least = at_least_min_utxo(context, output, owed)
        if least > owed:
            raise BuildError(
                f"{output.address} is owed {owed} lovelace, less than the ledger's minimum "
                f"UTxO ({least}): its lock left no return deposit; it refunds after the close"
            )
        add_output(builder, output)
