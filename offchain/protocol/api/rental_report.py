"""What a provider's daemon tells the market of its deployments (the endpoints, pods and batch
jobs it runs for renters, each paid on one of that renter's channels): one row per deployment
as its book holds it, minus what is private (the spec, the renter's key, the container's
address). The market shows them on its explorer; it holds no IOU and can check none of it but
the channel's provider, so the rows are the provider's word, signed by its key like its other
requests.

A row may only move forward between reports: pending -> running -> stopped | failed, its
counters never decrease, and what the renter signed (kind, channel, prices) never changes. A
name the book reuses after removing a stopped deployment is another deployment: rows are keyed
by (provider, name, created_ms)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from offchain.protocol.job.jobspec import MAX_DURATION_S, MAX_SUPPLY_LOVELACE

MAX_DEPLOYMENTS = 100  # rows in one report: a book with more is reported in several
MAX_REASON = 500  # characters of a stop's or failure's reason
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"  # provider.rentals.book.NAME, anchored
CHANNEL_PATTERN = r"^[0-9a-f]{56}$"  # blake2b-224 of the channel's terms, hex
# "sha256:<hex>" (an image id), "repo@sha256:<hex>" or "" before the image is known
IMAGE_PATTERN = r"^[\x21-\x7e]{0,255}$"
MAX_POSIX_MS = 253_402_300_799_999  # the last ms of the year 9999
MAX_COUNT = (1 << 63) - 1
MAX_PRICE = MAX_SUPPLY_LOVELACE // MAX_DURATION_S  # as an offer's price per second
State = Literal["pending", "running", "stopped", "failed"]
RANK = {"pending": 0, "running": 1, "stopped": 2, "failed": 2}
REPORT_PATH = "/providers/deployments"


def _storable(text: str) -> str:
    """Text either database stores as sent (no NUL, no lone surrogate)."""
    if "\x00" in text:
        raise ValueError("must not contain NUL (\\u0000)")
    text.encode()  # a lone surrogate raises UnicodeEncodeError, a ValueError
    return text


Ms = Annotated[int, Field(ge=0, le=MAX_POSIX_MS)]
Lovelace = Annotated[int, Field(ge=0, le=MAX_PRICE)]


class RentalRow(BaseModel):
    """One deployment as the provider's book holds it now."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    name: str = Field(pattern=NAME_PATTERN)
    kind: Literal["endpoint", "pod", "job"]  # a job: a batch job paid over the channel
    channel: str = Field(pattern=CHANNEL_PATTERN, description="The channel that pays for it.")
    image_digest: str = Field("", pattern=IMAGE_PATTERN)
    state: State
    reason: Annotated[str, AfterValidator(_storable)] = Field("", max_length=MAX_REASON)
    price_per_request: Lovelace
    price_per_second: Lovelace
    created_ms: Ms
    started_ms: Ms = Field(0, description="0 until running")
    stopped_ms: Ms = Field(0, description="0 until stopped or failed")
    requests: int = Field(0, ge=0, le=MAX_COUNT)
    served: int = Field(0, ge=0, le=MAX_SUPPLY_LOVELACE, description="Lovelace for requests.")
    seconds_run: int = Field(0, ge=0, le=MAX_POSIX_MS // 1000, description="Whole seconds "
                             "from started_ms to stopped_ms or the report.")  # fmt: skip

    @property
    def key(self) -> tuple[str, int]:
        return self.name, self.created_ms

    def lovelace(self) -> int:
        """What it earned: its requests' lovelace and its seconds at its price per second."""
        return self.served + self.price_per_second * self.seconds_run


class RentalReport(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    deployments: list[RentalRow] = Field(max_length=MAX_DEPLOYMENTS)


def backward(old: RentalRow, new: RentalRow) -> str | None:
    """Why `new` cannot follow `old` (the same deployment, reported earlier), or None."""
    for field in ("kind", "channel", "price_per_request", "price_per_second"):
        if getattr(old, field) != getattr(new, field):
            return f"{field} changed: what the renter signed never changes"
    if RANK[new.state] < RANK[old.state] or (RANK[old.state] == 2 and new.state != old.state):
        return f"state {old.state} cannot become {new.state}"
    for field in ("requests", "served", "seconds_run"):
        if getattr(new, field) < getattr(old, field):
            return f"{field} went down from {getattr(old, field)} to {getattr(new, field)}"
    for field in ("started_ms", "stopped_ms"):
        if getattr(old, field) and getattr(new, field) != getattr(old, field):
            return f"{field} changed once set"
    return None
