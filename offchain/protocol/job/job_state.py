"""Where a job stands at the market, as its public view names it: the market stores these
states (`offchain.market.models`) and the consumer and the provider read them back. No
pydantic here, so a command that only compares states starts at once."""

from __future__ import annotations

from enum import StrEnum


class JobState(StrEnum):
    REQUESTED = "requested"
    QUOTED = "quoted"
    FUNDED = "funded"
    ACCEPTED = "accepted"
    RUNNING = "running"
    COMPLETED = "completed"
    SETTLING = "settling"
    SETTLED = "settled"
    REFUNDED = "refunded"
    SLASHED = "slashed"
    FAILED = "failed"
    EXPIRED = "expired"
    CANCELLED = "cancelled"  # its escrow went back to the renter by a Cancel both signed


class CancelState(StrEnum):
    """Where a renter's cancel of a locked job stands; the escrow's spend makes the job
    cancelled (or, for a job that ran, its receipt settles it)."""

    REQUESTED = "requested"  # the renter posted its Cancel: the provider answers next
    SIGNED = "signed"  # the provider's witness is in: the renter adds its own and submits
    STOPPING = "stopping"  # the job had started: stopped, billed for the units it used
    REFUSED = "refused"  # the provider would not sign that transaction (`cancel_refusal`)


# What is left once a job is `completed` (its receipt signed), as every surface says it.
SETTLE_NEXT = ("its settlement is next: the market settles a payout at or above the ledger's "
               "minimum UTxO in its next batch, and the provider a smaller one itself within "
               "about a minute (its small-payout wait); the renter's lock comes back then, less "
               "the cost and the fee allowance")  # fmt: skip
