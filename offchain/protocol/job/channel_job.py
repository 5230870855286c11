"""A batch job paid over a payment channel instead of an escrow: what the renter signs in its
deploy (`ChannelJobSpec`: the same JobSpec an escrowed job runs, and the price per second it
pays by IOU) and the out-ref its receipt names (`receipt_ref`).

The receipt is the escrowed job's own `Receipt` (units, result and evidence hashes, signed by
the provider key over the settle script's ClaimPayload), so the renter verifies it with the
same code. A receipt must name an escrow's out-ref; a channel job has none, so it names
`receipt_ref(channel, name)`: a transaction id that is blake2b-256 of `RECEIPT_REF_DOMAIN`,
the channel id and the job's name as its renter gave it. No transaction has that id (a
transaction id is the hash of a CBOR transaction body, a map, and these bytes begin with 0x55,
no map's header), so such a receipt can never settle an escrow; it is evidence for the
renter, and the IOUs pay.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, Literal

from pycardano import TransactionId, TransactionInput
from pydantic import Field, ValidationError, model_validator

from offchain.protocol.job.jobspec import (
    MAX_SUPPLY_LOVELACE,
    JobSpec,
    JobSpecError,
    Resources,
    _Spec,
    describe,
)

CHANNEL_JOB = "job"  # the deploy spec's `kind` and the provider's deployment kind
RECEIPT_REF_DOMAIN = b"UNCHAINED/channel-job-receipt/v1"
# A job's deployment name makes its job id on the provider's machine (cgroup, container,
# results folder: the gateway's name for it, the renter's key tag and this name, joined by '_',
# at most 64): lower-case letters, digits and '_' only, as an escrowed job's id
JOB_NAME = re.compile(r"[a-z0-9][a-z0-9_]{0,46}")


class ChannelJobSpec(_Spec):
    """A deploy of `job` on a channel at `price_per_second` (lovelace per second of its bundle,
    the provider's offer price), billed per second it runs, at most `max_cost`."""

    kind: Literal["job"]
    price_per_second: int = Field(ge=1, le=MAX_SUPPLY_LOVELACE, description="Lovelace.")
    job: JobSpec

    @model_validator(mode="after")
    def _within_max_price(self) -> ChannelJobSpec:
        if self.max_cost > self.job.max_price_lovelace:
            raise ValueError(
                f"{self.price_per_second} lovelace per second for up to "
                f"{self.job.max_duration_s} s is {self.max_cost} lovelace, above the job's "
                f"max_price_lovelace {self.job.max_price_lovelace}"
            )
        return self

    @property
    def resources(self) -> Resources:
        """The job's bundle: what the provider's deploy terms check."""
        return self.job.resources

    @property
    def max_cost(self) -> int:
        """Lovelace the job may cost at most: its price for every second it may run."""
        return self.price_per_second * self.job.max_duration_s


def parse_channel_job(data: Any) -> ChannelJobSpec:
    """A ChannelJobSpec from already-parsed data; JobSpecError saying what is wrong."""
    try:
        return ChannelJobSpec.model_validate(data)
    except ValidationError as exc:
        raise JobSpecError(describe(exc)) from exc


def receipt_ref(channel: bytes, name: str) -> TransactionInput:
    """The out-ref a channel job's receipt names (see the module's docstring)."""
    digest = hashlib.blake2b(RECEIPT_REF_DOMAIN + channel + name.encode(), digest_size=32)
    return TransactionInput(TransactionId(digest.digest()), 0)
