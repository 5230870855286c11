"""Batch settle: many escrows, of many providers and consumers, in one transaction.

The settle script's withdrawal checks every escrow input (PROTOCOL.md). Each escrow is signed
by its own receipt or by a claim that covers several (one signature check for all of them);
each provider is paid once, in one output holding the sum its escrows earn; each run of
escrows of one consumer (adjacent in ledger order) is refunded in one output. Payouts carry
no datum. A party's payout is never topped up by the settler: a provider total below the
ledger's minimum UTxO waits for a later batch (`SmallPayout`), unless the provider settles
it itself (its own change raises its own output, or its payout address's), and a consumer's
refund always holds the return deposit its lock added (`escrow.refund_deposit`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Hashable, Sequence
from typing import TypeVar

from pycardano import (
    Address,
    ChainContext,
    PlutusData,
    Redeemer,
    ScriptHash,
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
from offchain.protocol.job.receipt import Receipt
from offchain.protocol.ledger.addresses import from_plutus
from offchain.protocol.ledger.claim import Claim
from offchain.protocol.ledger.split import SettleSplit, settle_split
from offchain.protocol.ledger.types import (
    BatchSettle,
    EscrowDatum,
    Settle,
    SettleClaim,
    SettleReceipt,
)
from offchain.protocol.tx.budgets import ExecutionBudgets
from offchain.protocol.tx.deployment import Deployment
from offchain.protocol.tx.escrow import escrow_datum
from offchain.protocol.tx.txbuild import (
    SIZE_MARGIN,
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

K = TypeVar("K", bound=Hashable)
ToSettle = tuple[UTxO, Receipt]  # a receipt beside the escrow UTxO it names
ClaimToSettle = tuple[Sequence[UTxO], Claim]  # a claim beside the escrow UTxOs it names


class SmallPayout(BuildError):
    """Providers whose totals in this batch are below the ledger's minimum UTxO: they wait."""

    def __init__(self, message: str, providers: Sequence[Address] = ()) -> None:
        super().__init__(message)
        self.providers = list(providers)


@dataclasses.dataclass(frozen=True)
class Escrow:
    """An escrow as a batch settles it: its split, and who signed its units (a claim's index,
    or -1: its own receipt); `signature` is its receipt's, or its claim's on the claim's
    first escrow."""

    utxo: UTxO
    datum: EscrowDatum
    split: SettleSplit
    units: int
    signer: int = -1
    signature: SettleReceipt | None = None

    @property
    def provider(self) -> bytes:
        """The provider's full address as Data (CBOR): whom its due is paid to."""
        return bytes(self.datum.provider.to_cbor())


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
    own_payout: Address | None = None,
) -> Transaction:
    """Settle escrows by their receipts and claims in one transaction.

    Each provider gets price x units, each consumer the rest less the fee allowance; what the
    allowances leave after the fee goes to the submitter as change (the submitter pays the fee
    up front from its address and signs). With `budgets` (kept by a submitter that settles
    often), a batch of a shape already evaluated declares its execution units and skips
    evaluateTransaction. The fee is paid from the submitter's UTxOs outside `busy`. A
    provider settling its own receipts raises its small payout with its change: that at
    `own_payout` (a cold address it is paid at; None: the submitter's own).
    """
    groups = sorted(
        (_claimed(deployment, utxos, claim) for utxos, claim in claims), key=lambda g: -len(g)
    )  # the largest claim costs least at index 0
    every = [
        dataclasses.replace(escrow, signer=index)
        for index, group in enumerate(groups)
        for escrow in group
    ]
    every += [_received(deployment, utxo, receipt) for utxo, receipt in receipts]
    if not every:
        raise BuildError("nothing to settle: no receipts")
    if len({escrow.utxo.input for escrow in every}) != len(every):
        raise BuildError("two claims for one escrow")
    budgets = budgets if budgets is not None else ExecutionBudgets()
    clock = Clock.now(context)
    builder = new_builder(context)
    payees = _pay_providers(context, builder, deployment, every, own_payout or submitter)
    first_refund = len(builder.outputs)
    ordered = sorted(every, key=lambda escrow: ledger_key(escrow.utxo))
    _refund_consumers(context, builder, deployment, ordered)
    items = [
        n
        for e in ordered
        for n in (e.units, e.signer, payees[e.provider] if e.split.provider else -1)
    ]
    signed = [
        SettleClaim(g[0].signature.note, g[0].signature.signature, g[0].datum.provider_vkey)
        for g in groups
        if g[0].signature is not None
    ]
    alone = [e.signature for e in ordered if e.signer < 0 and e.signature is not None]
    fee = fee_inputs(context, submitter, busy=busy)
    inputs = ledger_inputs([escrow.utxo for escrow in ordered], fee)
    # every spend costs the same; the batch's cost depends on its shape, the escrows' places
    # among the inputs included (a key input before them costs the script more, not the same)
    place = {ref: index for index, ref in enumerate(inputs)}
    places = tuple(place[escrow.utxo.input] for escrow in ordered)
    shape = ("settle-batch", len(inputs), len(builder.outputs), tuple(items[1::3]),
             tuple(items[2::3]), places)  # fmt: skip
    keyed: list[tuple[Hashable, PlutusData]] = [(("settle-spend",), Settle()) for _ in ordered]
    keyed.append((shape, BatchSettle(items, signed, alone, first_refund)))
    redeemers = budgets.redeemers(keyed)
    for escrow, redeemer in zip(ordered, redeemers, strict=False):
        source = script_source(builder, deployment.escrow_ref)
        builder.add_script_input(escrow.utxo, script=source, redeemer=redeemer)
    close = min(escrow.datum.close for escrow in ordered)
    builder.ttl = clock.ttl_until(close)
    if builder.ttl <= clock.tip_slot + 1:
        raise BuildError(f"the settle window closed at {iso(close)}")
    withdraw_zero(context, builder, deployment.settle_ref, deployment.reward_address, redeemers[-1])
    add_inputs(builder, fee)
    tx = build(builder, submitter, SIZE_MARGIN)
    budgets.learn([key for key, _ in keyed], redeemers)
    return tx


def withdraw_zero(
    context: ChainContext,
    builder: TransactionBuilder,
    ref: UTxO,
    reward_address: Address,
    redeemer: Redeemer,
) -> None:
    """Run the script held by `ref` as the transaction's withdrawal from `reward_address` (its
    stake address): the batch check of a settle or a channel claim."""
    staking = reward_address.staking_part
    assert isinstance(staking, ScriptHash)
    builder.withdrawals = Withdrawals({bytes(reward_address): reward_balance(context, staking)})
    builder.add_withdrawal_script(script_source(builder, ref), redeemer=redeemer)


def reward_balance(context: ChainContext, script: ScriptHash) -> int:
    """A withdraw-zero script's reward account balance: a withdrawal must take all of it (the
    ledger refuses any other amount), which goes to the submitter as change. Zero unless
    someone paid into it (a returned deposit names any reward account it likes)."""
    balance = queries(context).script_reward_balance(script)
    if balance is None:
        raise BuildError(
            f"the stake credential of script {script} is not registered: deploy registers it"
        )
    return balance


def _escrow(deployment: Deployment, utxo: UTxO, units: int) -> Escrow:
    datum = escrow_datum(deployment, utxo)
    try:
        split = settle_split(
            utxo.output.amount.coin, datum.price_per_unit, units, datum.max_units,
            datum.fee_allowance,
        )  # fmt: skip
    except ValueError as exc:
        raise BuildError(f"cannot settle {out_ref(utxo)}: {exc}") from exc
    return Escrow(utxo, datum, split, units)


def _received(deployment: Deployment, utxo: UTxO, receipt: Receipt) -> Escrow:
    """An escrow settled by its own receipt, checked as the settle script will."""
    if receipt.escrow != utxo.input:
        named = format_out_ref(receipt.escrow)
        raise BuildError(f"the receipt is for {named}, not {out_ref(utxo)}")
    escrow = _escrow(deployment, utxo, receipt.units)
    key = escrow.datum.provider_vkey
    if not receipt.signed_by(key, deployment.network_id, deployment.settle_hash):
        raise BuildError(f"the receipt for {out_ref(utxo)} is not signed by its provider key")
    claim = Claim.of_receipt(receipt)
    return dataclasses.replace(escrow, signature=SettleReceipt(claim.note, claim.signature))


def _claimed(deployment: Deployment, utxos: Sequence[UTxO], claim: Claim) -> list[Escrow]:
    """A claim's escrows, checked as the settle script will: one provider key, its signature
    (carried on the first escrow)."""
    by_ref = {utxo.input: utxo for utxo in utxos}
    if set(by_ref) != set(claim.units):
        named = ", ".join(sorted(format_out_ref(ref) for ref in claim.units))
        raise BuildError(f"the claim names {named}: give exactly those escrows")
    escrows = [_escrow(deployment, by_ref[ref], units) for ref, units in claim.units.items()]
    key = escrows[0].datum.provider_vkey
    if any(e.datum.provider_vkey != key for e in escrows):
        raise BuildError("a claim covers escrows of one provider key only")
    if not claim.signed_by(key, deployment.network_id, deployment.settle_hash):
        refs = ", ".join(out_ref(e.utxo) for e in escrows)
        raise BuildError(f"the claim on {refs} is not signed by the escrows' provider key")
    signature = SettleReceipt(claim.note, claim.signature)
    return [dataclasses.replace(escrows[0], signature=signature), *escrows[1:]]


def _pay_providers(
    context: ChainContext,
    builder: TransactionBuilder,
    deployment: Deployment,
    escrows: Sequence[Escrow],
    own: Address,
) -> dict[bytes, int]:
    """One output per provider address owed anything; their indices by address (Data)."""
    dues = [
        (
            escrow.provider,
            from_plutus(escrow.datum.provider, deployment.network),
            escrow.split.provider,
        )
        for escrow in escrows
        if escrow.split.provider
    ]
    return pay_providers(context, builder, dues, own)


def pay_providers(
    context: ChainContext,
    builder: TransactionBuilder,
    dues: Sequence[tuple[K, Address, int]],
    own: Address,
) -> dict[K, int]:
    """One output per provider (`dues`: its key, address and one amount it earns, for each
    item of a batch), holding its total, the provider with the most items first (it costs
    least at index 0); their indices by key. SmallPayout when a total is below the minimum
    UTxO and its provider is not the submitter, paid at `own` (whose change raises its own
    output: the submitter's address, or the payout address of a provider settling itself)."""
    owed: dict[K, list[int]] = {}
    addresses: dict[K, Address] = {}
    for key, to, amount in dues:
        owed.setdefault(key, []).append(amount)
        addresses[key] = to
    outputs, small = [], []
    for key, amounts in sorted(owed.items(), key=lambda item: -len(item[1])):
        to = addresses[key]
        output = TransactionOutput(to, sum(amounts))
        least = at_least_min_utxo(context, output, sum(amounts))
        if least > sum(amounts) and own.payment_part != to.payment_part:
            small.append(f"{to} earns {sum(amounts)} lovelace in this batch, below the minimum "
                         f"UTxO ({least})")  # fmt: skip
            continue
        output.amount.coin = least  # a provider settling itself raises its own output
        outputs.append((key, output))
    if small:
        paid = dict(outputs)
        waiting = [address for key, address in addresses.items() if key not in paid]
        raise SmallPayout(
            "; ".join(small) + ": it waits for a later batch, or its provider settles it",
            waiting,
        )
    return {key: add_output(builder, output) for key, output in outputs}


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
