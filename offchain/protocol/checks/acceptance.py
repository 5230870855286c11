"""Whether a provider takes a job on given escrow terms: the one acceptance check. The market
runs it when it quotes (so no renter locks ADA for a job its provider then refuses) and the
provider's daemon runs it again before it signs, on the escrow as the chain has it. Both give
the same reasons, in the renter's units (MiB, seconds, ADA per hour), each naming the field
of the spec or the escrow terms that would have to change.

Pure: the caller reads the chain (now, the ledger's minimum outputs, the bond's coverage).
The escrow check (`escrow_check`) stays the provider's own check of the escrow's datum and
value; this one is about the job and the offer, which both parties can run before a lock.
"""

from __future__ import annotations

import dataclasses

from offchain.chain.time import iso
from offchain.protocol.job.jobspec import JobSpec, Resources
from offchain.protocol.job.offer import ImageSupply
from offchain.protocol.ledger.amounts import ada, per_hour
from offchain.protocol.ledger.split import lock_amount

S_PER_H = 3600
# the bundle's resources as a renter reads them: (what, unit)
RESOURCES = {
    "gpus": ("GPU(s)", ""),
    "min_vram_mib": ("GPU memory per GPU", " MiB"),
    "cpu_cores": ("CPU core(s)", ""),
    "memory_mib": ("memory", " MiB"),
    "disk_mib": ("disk for /out", " MiB"),
    "gpu_memory_mib": ("GPU memory in a GPU slice", " MiB"),
    "gpu_sm_percent": ("of a GPU's SMs in a GPU slice", "%"),
}


@dataclasses.dataclass(frozen=True)
class Margins:
    """Chain time a provider keeps beyond the job's max duration: to start it (pull the image,
    fetch the inputs) and to get the settle on chain before the close."""

    start_ms: int = 2 * 60_000
    settle_ms: int = 5 * 60_000


MARGINS = Margins()


@dataclasses.dataclass(frozen=True)
class Offered:
    """What an offer promises, as the check reads it."""

    bundle: Resources  # what one job gets
    price_per_unit: int  # lovelace per second of the whole bundle
    images: ImageSupply  # which images it runs


@dataclasses.dataclass(frozen=True)
class EscrowTerms:
    """The escrow a job is (or would be) locked in, and what the chain says around it."""

    price_per_unit: int
    max_units: int
    deadline_ms: int
    close_ms: int  # deadline + settle window
    fee_allowance: int
    locked: int  # lovelace in the escrow
    now_ms: int  # the chain's now
    refund_deposit: int  # what the lock holds beyond the job and its fee: its refund's minimum
    refund_window_ms: int  # the consumer slashes until close + this
    bond_covers_before: int | None  # jobs closing before this are covered; None: no bond
    settle_fee_share: int = 0  # what the allowance must keep for the settle fee itself


@dataclasses.dataclass(frozen=True)
class AcceptanceRefusal:
    """One reason the job is refused: the field to change and what is wrong, for people."""

    field: str
    message: str

    def __str__(self) -> str:
        return self.message


def refusals(
    offer: Offered, spec: JobSpec, terms: EscrowTerms, margins: Margins = MARGINS
) -> list[AcceptanceRefusal]:
    """Every reason this offer's provider would refuse `spec` on `terms` (empty: it takes
    it): the bundle, the image, the price, the payouts' minimum and the time to close."""
    found = [
        AcceptanceRefusal(f"spec.resources.{name}", asks(name, wanted, offered, "the offer"))
        for name, wanted, offered in short_resources(spec.resources, offer.bundle)
    ]
    if not offer.images.runs(spec.image):
        found.append(AcceptanceRefusal("spec.image", offer.images.missing(spec.image)))
    found += _price(offer, spec) + _payouts(terms) + _time(spec, terms, margins)
    return found


def describe(found: list[AcceptanceRefusal]) -> str:
    """The refusals as one line."""
    return "; ".join(refusal.message for refusal in found)


def short_resources(wanted: Resources, offered: Resources) -> list[tuple[str, int, int]]:
    """(name, asked, offered) of each resource the bundle has less of than asked."""
    return [
        (name, getattr(wanted, name), getattr(offered, name))
        for name in RESOURCES
        if getattr(wanted, name) > getattr(offered, name)
    ]


def asks(name: str, wanted: int, offered: int, whose: str) -> str:
    """`the job asks 4096 MiB memory, the offer has 2048 MiB` (`whose`: which offer)."""
    what, unit = RESOURCES[name]
    return f"the job asks {wanted}{unit} {what}, {whose} has {offered}{unit}"


def max_rate(spec: JobSpec) -> str:
    """The most the renter pays per hour: its max price spread over its longest run (rounded
    down to the lovelace, as a limit is)."""
    return f"{ada(spec.max_price_lovelace * S_PER_H // spec.max_duration_s)}/h"


def price_refusal(spec: JobSpec, price_per_unit: int, whose: str) -> str:
    """`your max price 0.5 ADA/h (...) is below 0.61 ADA/h, the price of the offer`."""
    return (
        f"your max price {max_rate(spec)} ({ada(spec.max_price_lovelace)} for up to "
        f"{spec.max_duration_s} s) is below {per_hour(price_per_unit)}, the price of {whose}"
    )


def _price(offer: Offered, spec: JobSpec) -> list[AcceptanceRefusal]:
    if offer.price_per_unit * spec.max_duration_s <= spec.max_price_lovelace:
        return []
    message = price_refusal(spec, offer.price_per_unit, "the offer")
    return [AcceptanceRefusal("spec.max_price_lovelace", message)]


def _payouts(terms: EscrowTerms) -> list[AcceptanceRefusal]:
    """The lock pays the longest run, the settle fee and the refund's return deposit: no
    settlement then needs anyone's own lovelace, whatever units it bills."""
    needed = lock_amount(
        terms.price_per_unit, terms.max_units, terms.fee_allowance, terms.refund_deposit
    )
    found = []
    if terms.fee_allowance < terms.settle_fee_share:
        found.append(AcceptanceRefusal("fee_allowance", (
            f"the fee allowance of {ada(terms.fee_allowance)} is below the settle fee share of "
            f"{ada(terms.settle_fee_share)}"
        )))  # fmt: skip
    if terms.locked < needed:
        found.append(AcceptanceRefusal("lovelace", (
            f"{ada(terms.locked)} locked cannot pay {terms.max_units} s at "
            f"{per_hour(terms.price_per_unit)}, the fee allowance and the return deposit of "
            f"{ada(terms.refund_deposit)} ({ada(needed)})"
        )))  # fmt: skip
    return found


def settled_by(now_ms: int, max_duration_s: int, margins: Margins = MARGINS) -> int:
    """When a job started now would be settled at the latest: the provider's margins to start
    it and to settle it around its whole max duration."""
    return now_ms + margins.start_ms + max_duration_s * 1000 + margins.settle_ms


def _time(spec: JobSpec, terms: EscrowTerms, margins: Margins) -> list[AcceptanceRefusal]:
    """The deadline is ahead, the job fits before the close, and the bond (if any) can still
    be slashed after the close: the consumer's refund window ends before it can be withdrawn."""
    if terms.deadline_ms <= terms.now_ms:
        return [AcceptanceRefusal("deadline", (
            f"its deadline {iso(terms.deadline_ms)} has passed (the chain is at "
            f"{iso(terms.now_ms)})"
        ))]  # fmt: skip
    found = []
    done = settled_by(terms.now_ms, spec.max_duration_s, margins)
    if done > terms.close_ms:
        found.append(AcceptanceRefusal("spec.max_duration_s", (
            f"starting, running {spec.max_duration_s} s and settling needs until {iso(done)}, "
            f"the escrow closes at {iso(terms.close_ms)}"
        )))  # fmt: skip
    covers = terms.bond_covers_before
    if covers is not None and terms.close_ms >= covers:
        found.append(AcceptanceRefusal("spec.max_duration_s", (
            f"the provider's bond is withdrawable from "
            f"{iso(covers + terms.refund_window_ms)}, so it covers jobs closing before "
            f"{iso(covers)}; this job runs up to {spec.max_duration_s} s and closes at "
            f"{iso(terms.close_ms)}, and the renter may slash for "
            f"{terms.refund_window_ms // 1000} s after that: lower max_duration_s"
        )))  # fmt: skip
    return found
