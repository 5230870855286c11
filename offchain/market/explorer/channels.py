"""What the explorer's channel pages read (the chain follower's channel index, `channel_index`):
the channels list, one channel with every move, and the channels a provider or an address
takes part in. The market only indexes the chain: it holds no IOU, and shows none.
"""

from __future__ import annotations

from typing import Any

from sqlmodel import Session, col, select

from offchain.market.errors import NotFound
from offchain.market.explorer.queries import RECENT, Context, filtered, keyset
from offchain.market.models import Channel, ChannelEvent, ChannelState
from offchain.market.services.id_prefix import full_id

CHANNEL_COLUMNS = {"state": Channel.state, "provider": Channel.provider_id,
                   "renter": Channel.renter, "payee": Channel.provider}  # fmt: skip


def channel_row(channel: Channel) -> dict[str, Any]:
    """A channel as lists show it: who pays whom, how much went in, was claimed and remains."""
    return {
        "id": channel.id, "state": str(channel.state), "renter": channel.renter,
        "provider": channel.provider, "provider_id": channel.provider_id,
        "funded": channel.funded, "claimed": channel.claimed, "remaining": channel.lovelace,
        "close_period_ms": channel.close_period_ms, "closing_at_ms": channel.closing_at_ms,
        "ref": channel.ref, "opened_slot": channel.opened_slot,
    }  # fmt: skip


def channel_list(session: Session, filters: dict[str, str]) -> dict[str, Any]:
    """Channels newest first (by the slot of their open) under the filters (state, provider
    id, renter address, payee address), one page after the `after` cursor."""
    query, shown = filtered(select(Channel), CHANNEL_COLUMNS, filters)
    page, more = keyset(session, query, Channel.opened_slot, Channel.id, filters.get("after"))
    return {
        "filters": shown,
        "states": [state.value for state in ChannelState],
        "channels": [channel_row(c) for c in page],
        "next": more,
    }


def recent(session: Session, column: Any, value: str) -> list[dict[str, Any]]:
    """The newest channels whose `column` is `value` (a provider's, a renter's, a payee's)."""
    page, _ = keyset(session, select(Channel).where(col(column) == value), Channel.opened_slot,
                     Channel.id, None, RECENT * 2)  # fmt: skip
    return [channel_row(c) for c in page]


def at_address(session: Session, address: str) -> dict[str, list[dict[str, Any]]]:
    """The newest channels `address` pays from (as renter) and is paid by (as provider)."""
    return {"renter": recent(session, Channel.renter, address),
            "payee": recent(session, Channel.provider, address)}  # fmt: skip


def _event_row(event: ChannelEvent, ctx: Context) -> dict[str, Any]:
    return {
        "move": str(event.move), "amount": event.amount, "tx_id": event.tx_id,
        "slot": event.slot, "height": event.height, "time_ms": ctx.slot_ms(event.slot),
        "ref": event.ref, "state": str(event.state), "funded": event.funded,
        "claimed": event.claimed, "remaining": event.lovelace,
        "closing_at_ms": event.closing_at_ms,
    }  # fmt: skip


def channel_page(session: Session, ctx: Context, channel_id: str) -> dict[str, Any]:
    """One channel (its id or a unique prefix of it): its terms, where it stands, and every
    transaction that moved it."""
    try:
        channel = session.get(Channel, full_id(session, Channel.id, channel_id, "channel"))
    except NotFound:
        channel = None
    if channel is None:
        raise NotFound(
            f"no channel {channel_id} in the index: it holds the channels of this market's "
            "channel script opened since the market began following the chain",
            "channel_id",
        )
    events = session.exec(
        select(ChannelEvent).where(ChannelEvent.channel_id == channel.id)
        .order_by(col(ChannelEvent.slot), col(ChannelEvent.id))
    ).all()  # fmt: skip
    return {
        "channel": channel_row(channel) | {
            "renter_vkey": channel.renter_vkey, "provider_vkey": channel.provider_vkey,
            "nonce": channel.nonce, "open_tx": channel.open_tx,
        },
        "events": [_event_row(e, ctx) for e in events],
    }  # fmt: skip


def moved_by(session: Session, tx_id: str) -> list[tuple[str, str]]:
    """The channels transaction `tx_id` moved, each with its move, by channel id."""
    rows = session.exec(
        select(ChannelEvent.channel_id, ChannelEvent.move).where(ChannelEvent.tx_id == tx_id)
    ).all()
    return sorted((channel, str(move)) for channel, move in rows)
