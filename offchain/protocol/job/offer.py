"""A provider's offer as the escrow check reads it: who signs, where it is paid, and the price
per second of the bundle it quoted. Kept to what an escrow is checked against; the market's
offer (GPU model, bond, signature) builds on it, and may carry the provider's latest self-test
summary, which the explorer shows (the provider's own word, signed with the offer).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Literal

from pycardano import Address
from pydantic import BaseModel, ConfigDict, Field, model_validator

from offchain.protocol.job.jobspec import IMAGE_REFERENCE, JobSpec, Resources


@dataclasses.dataclass(frozen=True)
class Offer:
    provider_vkey: bytes  # 32-byte ed25519 key: signs acceptances and receipts
    payout_address: Address  # full address, stake part included: settlements pay exactly it
    price_per_unit: int  # lovelace per second of the whole bundle
    bundle: Resources  # what one job gets for that price

    def shortfall(self, spec: JobSpec) -> str | None:
        """What `spec` asks beyond the bundle (None when the bundle covers it): the price was
        quoted for the bundle, not for more."""
        over = [
            f"{name} {getattr(spec.resources, name)} > {getattr(self.bundle, name)}"
            for name in Resources.model_fields
            if getattr(spec.resources, name) > getattr(self.bundle, name)
        ]
        return ", ".join(over) or None


DEFAULT_REGISTRY = "docker.io/"
OFFICIAL = "library/"
MAX_IMAGES = 256  # what one offer lists


def normal_image(reference: str) -> str:
    """An image reference as docker resolves it, so equal images compare equal: `python` is
    `python:latest`, `docker.io/library/python:3.11` is `python:3.11`."""
    name = reference.removeprefix(DEFAULT_REGISTRY).removeprefix(OFFICIAL)
    last = name.rsplit("/", 1)[-1]
    return name if ":" in last or "@" in last else f"{name}:latest"


class OfferedImage(BaseModel):
    """An image on the provider's machine: a reference it runs as, and the image's digest
    (docker's image id), so a renter can see which build it is."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    reference: str = Field(pattern=rf"^(?:{IMAGE_REFERENCE.pattern})$", max_length=255)
    digest: str = Field(pattern=r"^sha256:[0-9a-f]{64}$")  # anchored: pydantic searches


@dataclasses.dataclass(frozen=True)
class ImageSupply:
    """Which images an offer runs: those it has (None: an offer that does not say, which runs
    none a spec names: its daemon would refuse what is not on its machine), and any other
    when it pulls missing images."""

    references: frozenset[str] | None
    pulls: bool = False

    @classmethod
    def of(cls, images: Iterable[OfferedImage] | None, pulls: bool = False) -> ImageSupply:
        if images is None:
            return cls(None, pulls)
        return cls(frozenset(normal_image(image.reference) for image in images), pulls)

    def runs(self, image: str) -> bool:
        return self.pulls or normal_image(image) in (self.references or ())

    def missing(self, image: str) -> str:
        """Why `image` does not run here, naming what does."""
        if self.references is None:
            return f"the offer lists no images, so it runs no {image}"
        has = listed(self.references, near=image)
        return f"the provider has no image {image} and pulls none; it has: {has}"


def listed(references: Iterable[str], near: str = "") -> str:
    """Image references for a message: at most a handful, those whose name holds the wanted
    image's (`near`: python for python:3.11-slim) first, then by name, so a provider's many
    other images do not hide the one the renter may have meant."""
    wanted = near.rsplit("/", 1)[-1].split("@")[0].split(":")[0]
    shown = sorted(references, key=lambda reference: (wanted not in reference, reference))
    more = f" and {len(shown) - 8} more" if len(shown) > 8 else ""
    return (", ".join(shown[:8]) or "none") + more


class SelfTestCheck(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, max_length=64)
    outcome: Literal["pass", "fail", "skip"]


class SelfTestSummary(BaseModel):
    """What `unchained provider selftest` found on this machine, and when (POSIX ms)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    passed: bool = Field(description="No check failed.")
    at_ms: int = Field(ge=0)
    checks: list[SelfTestCheck] = Field(max_length=64)

    @model_validator(mode="after")
    def _passed_means_none_failed(self) -> SelfTestSummary:
        if self.passed != all(check.outcome != "fail" for check in self.checks):
            raise ValueError("passed: true exactly when no check failed")
        return self

    @classmethod
    def of(cls, outcomes: Iterable[tuple[str, str]], at_ms: int) -> SelfTestSummary:
        checks = [SelfTestCheck.model_validate({"name": n, "outcome": o}) for n, o in outcomes]
        return cls(passed=all(c.outcome != "fail" for c in checks), at_ms=at_ms, checks=checks)
