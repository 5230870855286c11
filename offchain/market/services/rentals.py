"""A provider's report of its deployments (`offchain.protocol.api.rental_report`), kept for the
explorer: each row inserted or moved forward, the whole report refused if any row of it may
not be (another provider's channel, a step back), so a report is stored entirely or not at
all."""

from __future__ import annotations

from sqlalchemy import func
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from offchain.market.errors import Conflict, Forbidden
from offchain.market.models import Channel, Rental
from offchain.market.services import offers
from offchain.protocol.api.rental_report import RentalReport, RentalRow, backward

REPORTED = tuple(RentalRow.model_fields)
MAX_PER_PROVIDER = 10_000  # rows one provider may have here: a provider cannot fill the market


def as_row(deployment: Rental) -> RentalRow:
    """The stored deployment as its provider reported it."""
    return RentalRow(**{name: getattr(deployment, name) for name in REPORTED})


def record(session: Session, provider_id: str, report: RentalReport, at_ms: int) -> int:
    """Store the report of the provider `provider_id` (it posted an offer: NotFound otherwise)
    made at `at_ms`; the number of rows it holds. Forbidden for a channel the index says pays
    another provider; Conflict for a row that steps back or names a deployment twice."""
    offers.provider(session, provider_id)
    rows = report.deployments
    if len({row.key for row in rows}) < len(rows):
        raise Conflict("a deployment is named twice in one report", "deployments")
    _check_channels(session, provider_id, rows)
    named = select(Rental).where(
        Rental.provider_id == provider_id,
        col(Rental.name).in_({row.name for row in rows}),
    )
    stored = {(d.name, d.created_ms): d for d in session.exec(named)}
    _check_room(session, provider_id, sum(row.key not in stored for row in rows))
    for i, row in enumerate(rows):
        old = stored.get(row.key)
        if old is None:
            old = Rental(provider_id=provider_id, first_reported_ms=at_ms,
                                    **row.model_dump())  # fmt: skip
        elif (why := backward(as_row(old), row)) is not None:
            raise Conflict(f"deployment {row.name}: {why}", f"deployments.{i}")
        for name, value in row.model_dump().items():
            setattr(old, name, value)
        old.reported_ms = at_ms
        session.add(old)
    try:
        session.commit()
    except IntegrityError as exc:  # another report of the same new row landed first
        session.rollback()
        raise Conflict("a report of the same deployment was stored meanwhile: send it again",
                       "deployments") from exc  # fmt: skip
    return len(rows)


def _check_channels(session: Session, provider_id: str, rows: list[RentalRow]) -> None:
    """A channel the index holds must pay this provider (one it does not hold yet may be too
    new for the chain follower: the page says so)."""
    channels = {row.channel for row in rows}
    payees = dict(
        session.exec(
            select(Channel.id, Channel.provider_id).where(col(Channel.id).in_(channels))
        ).all()
    )  # fmt: skip
    for i, row in enumerate(rows):
        payee = payees.get(row.channel, provider_id)
        if payee != provider_id:
            raise Forbidden(f"channel {row.channel} pays provider {payee}, not the signer",
                            f"deployments.{i}.channel")  # fmt: skip


def _check_room(session: Session, provider_id: str, new: int) -> None:
    if not new:
        return
    held = session.exec(
        select(func.count()).select_from(Rental)
        .where(Rental.provider_id == provider_id)
    ).one()  # fmt: skip
    if held + new > MAX_PER_PROVIDER:
        raise Conflict(f"a provider may have {MAX_PER_PROVIDER} deployments here at most",
                       "deployments")  # fmt: skip
