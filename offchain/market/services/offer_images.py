"""Which images an offer runs, read from its signed body (no column: only a quote's search
needs them, and only for the few offers that meet the rest of a job), and the search's step
that keeps the offers that run a job's image."""

from __future__ import annotations

import json
from collections.abc import Sequence

from sqlalchemy import ColumnElement, or_
from sqlmodel import Session, col, select

from offchain.market.errors import Conflict
from offchain.market.models import Offer
from offchain.market.offer_query import OfferRecord
from offchain.protocol.job.offer import ImageSupply, OfferedImage, listed, normal_image

BODIES_AT_ONCE = 32  # offers whose signed bodies one read takes while looking for an image


def images_of(body: str) -> ImageSupply:
    """The images an offer's signed body lists (checked when it was posted)."""
    terms = json.loads(body)
    images = terms.get("images")
    if images is not None:
        images = [OfferedImage.model_validate(image) for image in images]
    return ImageSupply.of(images, terms.get("pulls_images", False))


def may_run(image: str) -> ColumnElement[bool]:
    """What the body of an offer that runs `image` contains (necessary when it names the image
    as docker does, as daemons do; the search decides)."""
    body = col(Offer.body)
    return or_(body.contains(normal_image(image), autoescape=True),
               body.contains('"pulls_images":true'))  # fmt: skip


def first_running(
    session: Session, found: Sequence[OfferRecord], image: str
) -> tuple[OfferRecord | None, set[str]]:
    """The first of `found` (in their order) whose offer runs `image`, and the images the
    offers before it have."""
    offered: set[str] = set()
    for start in range(0, len(found), BODIES_AT_ONCE):
        chunk = found[start : start + BODIES_AT_ONCE]
        read = select(Offer.id, Offer.body).where(col(Offer.id).in_([r.id for r in chunk]))
        bodies = {offer_id: body for offer_id, body in session.exec(read)}
        for record in chunk:
            supply = images_of(bodies[record.id])
            if supply.runs(image):
                return record, offered
            offered |= supply.references or set()
    return None, offered


def no_image(image: str, offered: set[str], count: int) -> Conflict:
    return Conflict(
        f"no offer can take the job: no provider has image {image}; images offered by the "
        f"{count} online offers that meet the rest of the job: {listed(offered, near=image)}",
        "spec.image",
    )
