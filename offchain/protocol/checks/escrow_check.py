"""Whether an escrow is safe for a provider to sign for: the validators cannot stop a consumer
locking an escrow that can never settle (a negative price, a close already past, a payout to
an address nobody can be paid at), and an acceptance of one is a bond the consumer may slash.
So the provider checks everything the chain does not before it signs an acceptance or a
receipt; the market and the consumer run the same check on a quote's escrow.

Time is the chain's (the tip's time, `Clock`), never the wall clock.
"""

from __future__ import annotations

from pycardano import ChainContext, UTxO

from offchain.chain.time import iso
from offchain.protocol.checks.acceptance import MARGINS, Margins, settled_by
from offchain.protocol.checks.bond_check import check_bond
from offchain.protocol.checks.refusal import (
    Refusal,
    Refused,
    check_address,
    check_vkey,
    script_datum,
)
from offchain.protocol.job.jobspec import JobSpec
from offchain.protocol.job.offer import Offer
from offchain.protocol.ledger.addresses import from_plutus, to_plutus
from offchain.protocol.ledger.payloads import HASH_BYTES
from offchain.protocol.ledger.split import lock_amount
from offchain.protocol.ledger.types import EscrowDatum
from offchain.protocol.tx import escrow as escrows
from offchain.protocol.tx.deployment import Deployment
from offchain.protocol.tx.txbuild import Clock

NON_NEGATIVE = ("price_per_unit", "max_units", "deadline", "settle_window", "fee_allowance")


class EscrowRefused(Refused):
    """The escrow is not safe for this provider to sign for; `reason` says why."""

    what = "escrow"


def check_terms(
    context: ChainContext, deployment: Deployment, escrow: UTxO, spec: JobSpec, offer: Offer
) -> EscrowDatum:
    """The escrow's datum if `escrow` is this deployment's, well formed, for `spec` at `offer`'s
    price, key and payout address, and holds enough to pay the whole job; EscrowRefused names
    the first thing that is not so. Needs no time: a receipt and an acceptance both need it."""
    datum = script_datum(escrow, EscrowDatum, deployment.escrow_hash, EscrowRefused)
    check_vkey(escrow, datum.provider_vkey, EscrowRefused)
    if len(datum.job_id) != HASH_BYTES:
        raise EscrowRefused(escrow, Refusal.JOB_ID_LENGTH, f"{len(datum.job_id)} bytes")
    negative = [
        f"{name} {getattr(datum, name)}" for name in NON_NEGATIVE if getattr(datum, name) < 0
    ]
    if negative:
        raise EscrowRefused(escrow, Refusal.RANGE, f"negative {', '.join(negative)}")
    check_address(escrow, "consumer", datum.consumer, EscrowRefused)
    check_address(escrow, "provider", datum.provider, EscrowRefused)
    _check_offer(escrow, datum, spec, offer)
    _check_amounts(context, deployment, escrow, datum)
    return datum


def check_acceptable(
    context: ChainContext,
    deployment: Deployment,
    escrow: UTxO,
    spec: JobSpec,
    offer: Offer,
    bond: UTxO | None,
    margins: Margins = MARGINS,
) -> EscrowDatum:
    """`check_terms`, and from the chain's now there is room to start, run the whole max
    duration and settle before the close; `bond`, the bond backing the acceptance (None: no
    bond), must cover the close (`check_bond`). Call it before signing an Acceptance."""
    datum = check_terms(context, deployment, escrow, spec, offer)
    now = _check_open(context, escrow, datum)
    done = settled_by(now, spec.max_duration_s, margins)
    if done > datum.close:
        raise EscrowRefused(
            escrow,
            Refusal.NO_TIME,
            f"starting, running {spec.max_duration_s} s and settling needs until "
            f"{iso(done)}, the escrow closes at {iso(datum.close)}",
        )
    if bond is not None:
        check_bond(deployment, bond, offer.provider_vkey, offer.payout_address, 0, datum.close, now)
    return datum


def check_settleable(
    context: ChainContext, deployment: Deployment, escrow: UTxO, spec: JobSpec, offer: Offer
) -> EscrowDatum:
    """`check_terms`, and the escrow is not closed yet. Call it before signing a receipt."""
    datum = check_terms(context, deployment, escrow, spec, offer)
    _check_open(context, escrow, datum)
    return datum


def _check_offer(escrow: UTxO, datum: EscrowDatum, spec: JobSpec, offer: Offer) -> None:
    """The escrow names this provider and this job at the price it offered for the spec."""
    if datum.provider_vkey != offer.provider_vkey:
        raise EscrowRefused(escrow, Refusal.OTHER_KEY, f"it names {datum.provider_vkey.hex()}")
    if datum.provider != to_plutus(offer.payout_address):
        paid = from_plutus(datum.provider, offer.payout_address.network)
        raise EscrowRefused(
            escrow, Refusal.OTHER_ADDRESS, f"it pays {paid}, the offer {offer.payout_address}"
        )
    shortfall = offer.shortfall(spec)
    if shortfall:
        raise EscrowRefused(escrow, Refusal.BUNDLE, f"the spec asks {shortfall}")
    if datum.price_per_unit != offer.price_per_unit:
        raise EscrowRefused(
            escrow,
            Refusal.OTHER_PRICE,
            f"{datum.price_per_unit} lovelace per unit, {offer.price_per_unit} offered",
        )
    if datum.job_id != spec.job_id():
        raise EscrowRefused(
            escrow, Refusal.JOB_ID, f"{datum.job_id.hex()}, the spec's is {spec.job_id().hex()}"
        )
    if datum.max_units < spec.max_duration_s:
        raise EscrowRefused(
            escrow,
            Refusal.UNITS,
            f"it pays at most {datum.max_units} units; the job may bill up to "
            f"{spec.max_duration_s} (its max_duration_s, one unit a second)",
        )


def _check_amounts(
    context: ChainContext, deployment: Deployment, escrow: UTxO, datum: EscrowDatum
) -> None:
    """The escrow pays the whole job, its fee allowance and the return deposit of its refund
    (`escrows.refund_deposit`): every settle's payouts then come out of the escrow itself, at
    any unit count, and a settle never needs anyone's own lovelace. A provider's payout below
    the ledger's minimum UTxO is not the escrow's concern: it waits for a later batch or its
    provider settles it, so a cheap job is taken like any other."""
    locked = escrow.output.amount.coin
    deposit = escrows.refund_deposit(context, deployment, datum.consumer)
    needed = lock_amount(datum.price_per_unit, datum.max_units, datum.fee_allowance, deposit)
    if locked < needed:
        raise EscrowRefused(
            escrow, Refusal.UNDERFUNDED,
            f"{locked} lovelace locked, {needed} needed (with a return deposit of {deposit})",
        )  # fmt: skip


def _check_open(context: ChainContext, escrow: UTxO, datum: EscrowDatum) -> int:
    """The chain's now, if the escrow has not closed by then."""
    now = Clock.now(context).tip_ms
    if now >= datum.close:
        raise EscrowRefused(
            escrow, Refusal.CLOSED, f"it closed at {iso(datum.close)}, the chain is at {iso(now)}"
        )
    return now
