"""The daemon's report of its deployments to the market, each heartbeat: every endpoint and pod
in its book (`provider.rentals.book.RentalBook.list()`) as `offchain.protocol.api.rental_report`
rows, signed like its other requests, so the explorer shows them beside their channels. Only
the rows that changed since the market last took them are sent (a running one per second
changes each time), at most MAX_DEPLOYMENTS a request. A refusal or a lost market is logged
and the rows are sent again at the next heartbeat: a report is never worth a job's time."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from pydantic import ValidationError

from offchain.protocol.api.market_errors import MarketError
from offchain.protocol.api.market_link import Body, MarketLink
from offchain.protocol.api.rental_report import (
    MAX_DEPLOYMENTS,
    MAX_REASON,
    REPORT_PATH,
    RentalRow,
)
from provider.rentals.book import Rental

if TYPE_CHECKING:
    from provider.daemon.main import Daemon

log = logging.getLogger("unchained.provider")


def seconds_run(deployed: Rental, now_ms: int) -> int:
    """Whole seconds from its start to its stop (or `now_ms`); 0 before it runs."""
    if not deployed.started_ms:
        return 0
    until = deployed.stopped_ms or now_ms
    return max(0, until - deployed.started_ms) // 1000


def report_row(deployed: Rental, now_ms: int) -> RentalRow:
    """The row the market reads (ValidationError for one it would refuse)."""
    return RentalRow(
        name=deployed.public_name, kind=deployed.kind, channel=deployed.channel.hex(),  # type: ignore[arg-type]
        image_digest=deployed.image_digest, state=deployed.state,  # type: ignore[arg-type]
        reason=deployed.reason[:MAX_REASON], price_per_request=deployed.price_per_request,
        price_per_second=deployed.price_per_second, created_ms=deployed.created_ms,
        started_ms=deployed.started_ms, stopped_ms=deployed.stopped_ms,
        requests=deployed.requests, served=deployed.served,
        seconds_run=seconds_run(deployed, now_ms),
    )  # fmt: skip


class RentalReporter:
    """Sends the book's rows that changed since the market last took them."""

    def __init__(
        self, link: MarketLink, book: Callable[[], Sequence[Rental]],
        clock: Callable[[], float] = time.time,
    ) -> None:  # fmt: skip
        self.link = link
        self.book = book  # the rows now, e.g. `RentalBook.list` (read in a worker thread)
        self.clock = clock
        self.taken: dict[tuple[str, int], RentalRow] = {}  # as the market last took them

    async def tick(self) -> None:
        """One report (nothing is sent when nothing changed)."""
        now_ms = int(self.clock() * 1000)
        rows = []
        for deployed in await asyncio.to_thread(self.book):
            try:
                rows.append(report_row(deployed, now_ms))
            except ValidationError as exc:  # the rest are reported all the same
                log.warning("deployment %s not reported: %s", deployed.name, exc)
        keys = {row.key for row in rows}
        self.taken = {key: row for key, row in self.taken.items() if key in keys}
        changed = [row for row in rows if self.taken.get(row.key) != row]
        for start in range(0, len(changed), MAX_DEPLOYMENTS):
            chunk = changed[start : start + MAX_DEPLOYMENTS]
            body = Body.of_json({"deployments": [row.model_dump() for row in chunk]})
            try:
                await self.link.send("POST", REPORT_PATH, body)
            except MarketError as exc:
                log.warning("deployments not reported, again at the next heartbeat: %s", exc)
                return
            self.taken.update((row.key, row) for row in chunk)


def reports(daemon: Daemon) -> RentalReporter:
    """The daemon's reporter: its book's rows, sent on its market link (`Daemon.run` ticks it
    each heartbeat)."""
    return RentalReporter(daemon.link, daemon.endpoints.list)
