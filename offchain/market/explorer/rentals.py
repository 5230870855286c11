"""What the explorer's deployment pages read: the endpoints and pods providers report
(`services.deployments`), each beside its channel as the chain index holds it, so a page puts
the provider's word (requests, seconds, lovelace served) next to what the chain says was
claimed on the channel that pays for it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlmodel import Session, col, select

from offchain.market.errors import NotFound
from offchain.market.explorer.queries import RECENT, filtered, keyset, row_id
from offchain.market.models import Channel, Rental
from offchain.protocol.api.rental_report import RANK

COLUMNS = {"state": Rental.state, "kind": Rental.kind,
           "provider": Rental.provider_id,
           "channel": Rental.channel}  # fmt: skip


def _row(d: Rental, channel: Channel | None) -> dict[str, Any]:
    """A deployment as pages show it, with its channel's state and claimed lovelace (None
    while the index does not hold the channel)."""
    return {
        "id": d.id, "kind": d.kind, "name": d.name, "provider_id": d.provider_id,
        "channel": d.channel, "image_digest": d.image_digest, "state": d.state,
        "reason": d.reason, "price_per_request": d.price_per_request,
        "price_per_second": d.price_per_second, "requests": d.requests,
        "seconds_run": d.seconds_run, "served": d.served,
        "lovelace": d.served + d.price_per_second * d.seconds_run,
        "created_ms": d.created_ms, "started_ms": d.started_ms, "stopped_ms": d.stopped_ms,
        "reported_ms": d.reported_ms,
        "channel_state": None if channel is None else str(channel.state),
        "channel_claimed": None if channel is None else channel.claimed,
        # the market refuses a report naming another provider's channel once it is indexed;
        # one indexed after the report is flagged here instead
        "channel_payee_differs": channel is not None and channel.provider_id != d.provider_id,
    }  # fmt: skip


def _rows(session: Session, deployments: Sequence[Rental]) -> list[dict[str, Any]]:
    ids = {d.channel for d in deployments}
    channels = {c.id: c for c in session.exec(select(Channel).where(col(Channel.id).in_(ids)))}
    return [_row(d, channels.get(d.channel)) for d in deployments]


def deployment_list(session: Session, filters: dict[str, str]) -> dict[str, Any]:
    """Deployments newest first (by when the provider created them) under the filters (state,
    kind, provider id, channel id), one page after the `after` cursor."""
    query, shown = filtered(select(Rental), COLUMNS, filters)
    page, more = keyset(session, query, Rental.created_ms, Rental.id,
                        filters.get("after"), key_type=row_id)  # fmt: skip
    return {
        "filters": shown,
        "states": list(RANK),
        "kinds": ["endpoint", "pod", "job"],
        "deployments": _rows(session, page),
        "next": more,
    }


def recent(session: Session, column: Any, value: str) -> list[dict[str, Any]]:
    """The newest deployments whose `column` is `value` (a provider's, a channel's)."""
    query = select(Rental).where(col(column) == value)
    page, _ = keyset(session, query, Rental.created_ms, Rental.id, None,
                     RECENT * 2, key_type=row_id)  # fmt: skip
    return _rows(session, page)


def deployment_page(session: Session, deployment_id: int) -> dict[str, Any]:
    """One deployment, and the newest its channel pays for (itself among them): the channel's
    IOUs cover them all, so what was claimed on it is theirs together."""
    found = session.get(Rental, deployment_id)
    if found is None:
        raise NotFound(f"no deployment {deployment_id}", "deployment_id")
    shown = _rows(session, [found])[0]
    on_channel = recent(session, Rental.channel, found.channel)
    return {
        "deployment": shown,
        "on_channel": on_channel,
        "channel_lovelace": sum(d["lovelace"] for d in on_channel),
    }
