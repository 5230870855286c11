"""The daemon's deployments reach the market's explorer: `unchained provider run` on the devnet
market fails a deployment whose channel it does not serve, and its next heartbeat's report
shows it failed, with the reason, on the explorer. The reporter sends only what changed, at
most MAX_DEPLOYMENTS rows a request, and sends again what the market did not take."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx

from offchain.market.services.offers import key_hash
from offchain.protocol.api.market_link import Body, MarketLink
from offchain.protocol.api.rental_report import MAX_DEPLOYMENTS
from offchain.protocol.api.signed_request import KeySigner
from provider.daemon.rental_reports import RentalReporter
from provider.rentals.book import Rental, RentalBook
from tests.market.client import Party, serve
from tests.market.test_lifecycle import offer_terms
from tests.protocol.onchain import wallet
from tests.provider.daemon_harness import IDENTITY, daemon_on_market, quiet_market

CHANNEL = bytes.fromhex("c3" * 28)


def deployment(name: str, **changes: Any) -> Rental:
    """A pending endpoint on CHANNEL, as the gateway's deploy stores it."""
    fields: dict[str, Any] = {
        "name": name, "kind": "endpoint", "channel": CHANNEL, "renter_vkey": bytes(32),
        "spec_json": "{}", "state": "pending", "reason": "", "image_digest": "", "upstream": "",
        "public_port": 0, "price_per_request": 2_000, "price_per_second": 0,
        "created_ms": time.time_ns() // 1_000_000, **changes,
    }  # fmt: skip
    return Rental(**fields)


async def listed(http: httpx.AsyncClient, provider: str, until: str) -> list[dict[str, Any]]:
    """The provider's deployments on the explorer, once one is in state `until` (30 s)."""
    for _ in range(300):
        found = await http.get("/api/explorer/deployments", params={"provider": provider})
        rows = found.json()["deployments"]
        if any(row["state"] == until for row in rows):
            return rows
        await asyncio.sleep(0.1)
    raise AssertionError(f"no deployment {until} on the explorer: {rows}")


async def test_a_daemons_failed_deployment_reaches_the_explorer(devnet, tmp_path):
    deployment_file, _, settings = await quiet_market(devnet, tmp_path)
    async with daemon_on_market(devnet, tmp_path, deployment_file, settings, bundles=1) as (
        daemon, provider, url,
    ):  # fmt: skip
        book = RentalBook.in_state_dir(daemon.state_dir)
        book.add(deployment("classifier"))
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            rows = await listed(http, key_hash(provider.vkey), "failed")
        book.close()
    [shown] = rows
    assert (shown["name"], shown["kind"], shown["channel"]) == ("classifier", "endpoint",
                                                                 CHANNEL.hex())  # fmt: skip
    assert f"channel {CHANNEL.hex()} is not served here" in shown["reason"]
    assert shown["channel_claimed"] is None and shown["stopped_ms"] > 0


class Counted(MarketLink):
    """The link, counting the reports it sends."""

    sent: list[int]

    async def send(self, method: str, path: str, body: Body | None = None, **kw: Any) -> Any:
        self.sent.append(len(json.loads(body.content)["deployments"]) if body else 0)
        return await super().send(method, path, body, **kw)


async def test_only_what_changed_is_sent_in_bounded_requests(devnet, tmp_path):
    _, _, settings = await quiet_market(devnet, tmp_path)
    key = await wallet(devnet)
    rows = [deployment(f"e{i:03}", created_ms=1_700_000_000_000) for i in range(MAX_DEPLOYMENTS)]
    rows.append(deployment("pod", kind="pod", state="running", price_per_request=0,
                           price_per_second=10, started_ms=1_700_000_000_000,
                           created_ms=1_700_000_000_000))  # fmt: skip
    clock = [1_700_000_000.0]
    with serve(settings) as url:
        link = Counted.open(url, IDENTITY, KeySigner(key.key, key.address.network))
        link.sent = []
        reporter = RentalReporter(link, lambda: rows, lambda: clock[0])
        try:
            await reporter.tick()  # no offer yet: refused, kept for the next heartbeat
            assert link.sent == [MAX_DEPLOYMENTS] and reporter.taken == {}
            async with httpx.AsyncClient(base_url=url, timeout=30) as http:
                party = Party.new(http, IDENTITY, key)
                assert (await party.send("POST", "/offers", offer_terms(party))).status_code == 201
                link.sent.clear()
                await reporter.tick()
                assert link.sent == [MAX_DEPLOYMENTS, 1]  # all of them, in two requests
                await reporter.tick()
                assert link.sent == [MAX_DEPLOYMENTS, 1]  # nothing changed: nothing sent
                clock[0] += 3  # the pod ran 3 s more
                await reporter.tick()
                assert link.sent == [MAX_DEPLOYMENTS, 1, 1]
                pods = (await http.get("/api/explorer/deployments?kind=pod")).json()
        finally:
            await link.aclose()
    [pod] = pods["deployments"]
    assert (pod["seconds_run"], pod["lovelace"]) == (3, 30)
