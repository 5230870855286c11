"""Which images an offer runs, read from its signed body (no column: only a quote's search
needs them, and only for the few offers that meet the rest of a job), and the search's step
that keeps the offers that run a job's image."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

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


ESCAPE = "/"  # the LIKE escape of `named`
PULLS = '"pulls_images":true'  # in the body of an offer that pulls what it lacks


def named(image: str) -> str:
    """`image` as docker names it (as daemons do), its LIKE wildcards escaped with ESCAPE: what
    the body of an offer that runs it contains (necessary, unless it pulls: the search
    decides). SQLAlchemy's autoescape, for a value bound per query."""
    text = normal_image(image)
    for special in (ESCAPE, "%", "_"):
        text = text.replace(special, ESCAPE + special)
    return text


def first_running(
    session: Session, found: Sequence[OfferRecord], image: str,
    known: Mapping[int | None, str] | None = None,
) -> tuple[OfferRecord | None, set[str]]:  # fmt: skip
    """The first of `found` (in their order) whose offer runs `image`, and the images the
    offers before it have; the bodies not `known` (by offer id) are read here."""
    offered: set[str] = set()
    bodies: dict[int | None, str] = dict(known or {})
    for start in range(0, len(found), BODIES_AT_ONCE):
        chunk = found[start : start + BODIES_AT_ONCE]
        missing = [record.id for record in chunk if record.id not in bodies]
        if missing:
            read = select(Offer.id, Offer.body).where(col(Offer.id).in_(missing))
            bodies.update((offer_id, body) for offer_id, body in session.exec(read))
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
