"""What the explorer shows of a provider's health: uptime from heartbeats, and the self-test
summary its latest offer carried.

Each heartbeat (an offer counts as one) extends the provider's current online span, or starts
a new one after a gap longer than the online window: one row per stretch online keeps a week
of history small, and uptime over a window is the time the spans cover in it, summed per
provider in one grouped query."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import case, func, update
from sqlmodel import Session, col, select

from offchain.market.models import OnlineSpan, Provider
from offchain.protocol.job.offer import SelfTestSummary

DAY_MS = 86_400_000
WINDOWS = {"24h": DAY_MS, "7d": 7 * DAY_MS}


def heartbeat(session: Session, provider_id: str, at_ms: int, online_ms: int) -> None:
    """Count a heartbeat at `at_ms`: the span it continues, or a new one."""
    _extend(session, provider_id, at_ms, online_ms)
    session.commit()


def offered(
    session: Session, provider: Provider, at_ms: int, online_ms: int,
    selftest: SelfTestSummary | None,
) -> None:  # fmt: skip
    """A new offer: a heartbeat, and the self-test it carries (None: it reported none)."""
    _extend(session, provider.id, at_ms, online_ms)
    provider.selftest = selftest.model_dump_json() if selftest is not None else None
    session.add(provider)
    session.commit()


def _extend(session: Session, provider_id: str, at_ms: int, online_ms: int) -> None:
    """Widen the span within the online window of `at_ms` to cover it, or start one (a
    heartbeat that arrives late, from another process's clock, still lands in its own span)."""
    start, end = col(OnlineSpan.start_ms), col(OnlineSpan.end_ms)
    extended = session.exec(
        update(OnlineSpan)
        .where(col(OnlineSpan.provider_id) == provider_id, end >= at_ms - online_ms,
               start <= at_ms + online_ms)
        .values(start_ms=case((start > at_ms, at_ms), else_=start),
                end_ms=case((end < at_ms, at_ms), else_=end))
    )  # fmt: skip
    if extended.rowcount == 0:
        session.add(OnlineSpan(provider_id=provider_id, start_ms=at_ms, end_ms=at_ms))


def uptime(session: Session, provider_ids: Sequence[str], now_ms: int) -> dict[str, dict[str, int]]:
    """Per provider and window (`24h`, `7d`): the ms its spans cover in the window ending now."""
    found = {p: dict.fromkeys(WINDOWS, 0) for p in provider_ids}
    if not provider_ids:
        return found
    start, end = col(OnlineSpan.start_ms), col(OnlineSpan.end_ms)
    until = case((end > now_ms, now_ms), else_=end)

    def covered(window_ms: int) -> object:
        since = now_ms - window_ms
        return func.sum(
            case((end > since, until - case((start < since, since), else_=start)), else_=0)
        )

    rows = session.exec(
        select(OnlineSpan.provider_id, *(covered(w) for w in WINDOWS.values()))
        .where(col(OnlineSpan.provider_id).in_(provider_ids), end > now_ms - max(WINDOWS.values()))
        .group_by(col(OnlineSpan.provider_id))
    ).all()  # fmt: skip
    for row in rows:
        provider_id, sums = row[0], row[1:]
        found[provider_id] = {name: int(ms or 0) for name, ms in zip(WINDOWS, sums, strict=True)}
    return found
