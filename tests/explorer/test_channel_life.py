"""A payment channel's life on the devnet, watched through the explorer in Chromium: a renter
opens a channel for a provider with an offer, the provider claims an IOU, the renter tops the
channel up, starts its close and, once the close period ends, drains it; the market's follower
indexes each move from the chain alone (the terms from the open's metadata), and the channel
page shows its terms, deposit, claimed and remaining amounts, its close and every transaction,
each link opening the transaction with its channel datum and redeemer decoded. The channels
list, the provider's page and the renter's address page list it; every page is photographed
at phone and desktop sizes with no console error. The provider reports a pod the channel pays
for: the deployments list, its page (with the channel's claimed amount) and the channel's page
show it."""

from __future__ import annotations

import httpx

from offchain.chain.utxo import format_out_ref
from offchain.market.explorer.format import ada, when
from offchain.market.services.offers import key_hash
from offchain.protocol.api.rental_report import REPORT_PATH
from offchain.protocol.tx import channel as channels
from tests.explorer.viewer import Viewer
from tests.market.channel_flow import claim, indexed, moves, top_up
from tests.market.client import serve
from tests.market.database import served_at_head
from tests.market.flow import provider_with_offer
from tests.market.test_deployment_reports import row
from tests.protocol.channels import CLOSE_MS, left, open_on
from tests.protocol.onchain import ADA, confirm, travel_to, wallet


async def test_a_channels_life_through_the_explorer(
    devnet, market_deployment, settings, browser, artifacts
):
    deployment = market_deployment
    with serve(served_at_head(settings)) as url:
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            provider = await provider_with_offer(devnet, http, settings.identity)
            renter = await wallet(devnet)
            channel, terms, opened = await open_on(devnet, deployment, renter, provider.wallet)
            channel_id, deposit = channel.id.hex(), channel.lovelace
            first = (await indexed(http, channel, 1))["channel"]
            assert first == first | {
                "id": channel_id, "state": "open", "renter": str(renter.address),
                "provider": str(provider.wallet.address),
                "provider_id": key_hash(provider.wallet.vkey), "funded": deposit, "claimed": 0,
                "remaining": deposit, "close_period_ms": CLOSE_MS, "closing_at_ms": None,
                "ref": format_out_ref(channel.utxo.input),
                "nonce": format_out_ref(terms.nonce.to_input()),
                "renter_vkey": renter.vkey.hex(), "provider_vkey": provider.wallet.vkey.hex(),
            }  # fmt: skip

            home = (await http.get("/api/explorer")).json()
            assert home["channels"] == {"count": 1, "lovelace": deposit}  # this market's only

            claimed, channel = await claim(
                devnet, deployment, renter, provider.wallet, channel, 3 * ADA
            )
            pod = row("notebook", kind="pod", channel=channel_id, state="running",
                      price_per_request=0, price_per_second=40, started_ms=1,
                      seconds_run=25)  # fmt: skip
            reported = await provider.send("POST", REPORT_PATH, {"deployments": [pod]})
            assert reported.status_code == 200, reported.text
            topped, channel = await top_up(devnet, deployment, renter, channel, terms, 7 * ADA)
            closing = channels.start_close(
                devnet.context(), deployment, channel, terms, renter.address
            )
            started = await confirm(devnet, renter.sign(closing))
            channel = left(deployment, started)
            await travel_to(devnet, channel.datum.closing_at + 1)
            drain = channels.drain(devnet.context(), deployment, channel, terms, renter.address)
            drained = await confirm(devnet, renter.sign(drain))

            page = await indexed(http, channel, 5)
            ids = [tx.id.payload.hex() for tx in (opened, claimed, topped, started, drained)]
            assert moves(page) == [
                ("open", deposit, ids[0]), ("claim", 3 * ADA, ids[1]), ("top-up", 7 * ADA, ids[2]),
                ("start-close", 0, ids[3]), ("drain", deposit + 4 * ADA, ids[4]),
            ]  # fmt: skip
            assert [e["state"] for e in page["events"]] == [
                "open", "open", "open", "closing", "drained"
            ]  # fmt: skip
            now = page["channel"]
            assert (now["state"], now["funded"], now["claimed"], now["remaining"], now["ref"]) == (
                "drained", deposit + 7 * ADA, 3 * ADA, 0, None
            )  # fmt: skip
            assert now["closing_at_ms"] == channel.datum.closing_at

            view = await Viewer.open_in(browser, url, artifacts)
            browser_page = view.page
            await view.visit(f"/explorer/channels/{channel_id}")
            assert await view.text("#channel-id") == channel_id
            assert await view.text("#channel-state") == "drained"
            assert ada(deposit + 7 * ADA) in await view.text("[data-testid=deposit]")
            assert ada(3 * ADA) in await view.text("[data-testid=claimed]")
            assert await view.text("[data-testid=remaining]") == ada(0)
            closing_at = await view.text("[data-testid=closing-at]")
            assert closing_at.startswith(when(channel.datum.closing_at))
            assert str(channel.datum.closing_at) not in closing_at  # never the raw ms
            rows = browser_page.locator("[data-testid=moves] tbody tr")
            assert await rows.count() == 5
            for tx_id in ids:
                assert await browser_page.locator(f'a[href="/explorer/txs/{tx_id}"]').count() >= 1
            await view.shoot("channel")

            # the claim's link opens the batch claim: the channel spent by ChannelClaim, its
            # continuing datum with `claimed` raised, the claim script's BatchClaim
            await rows.nth(1).locator("a.hash").first.click()
            await browser_page.wait_for_url(f"**/explorer/txs/{ids[1]}")
            spent = await browser_page.locator(".utxo.script-channel").first.inner_text()
            assert "ChannelDatum" in spent and "ChannelClaim" in spent
            assert "BatchClaim" in await view.text("#main")
            assert f"{channel_id[:10]}" in await view.text("[data-testid=tx-channels]")
            await view.shoot("channel-claim")

            await view.visit("/explorer")
            assert await view.text("[data-testid=channels]") == ada(0)  # drained: none left
            await view.shoot("home-channels")
            await view.visit("/explorer/channels")
            assert channel_id[:10] in await view.text("[data-testid=channels]")
            await view.shoot("channels")
            await view.visit(f"/explorer/providers/{key_hash(provider.wallet.vkey)}")
            assert channel_id[:10] in await view.text("[data-testid=pchannels-h]")
            await view.shoot("provider-channels")
            await view.visit(f"/explorer/addresses/{renter.address}")
            assert channel_id[:10] in await view.text("[data-testid=renter-channels-h]")
            await view.shoot("address-channels")
            await view.visit("/explorer/deployments")
            assert "notebook" in await view.text("[data-testid=deployments]")
            await view.shoot("deployments")
            await browser_page.get_by_role("link", name="notebook").first.click()
            await browser_page.wait_for_url("**/explorer/deployments/*")
            assert await view.text("#deployment-name") == "notebook"
            assert await view.text("#deployment-state") == "running"
            assert await view.text("[data-testid=seconds]") == "25"
            assert ada(3 * ADA) in await view.text("[data-testid=claimed]")
            assert ada(40 * 25) in await view.text("[data-testid=served]")
            await view.shoot("deployment")
            await browser_page.locator("[data-testid=channel] a").click()
            await browser_page.wait_for_url(f"**/explorer/channels/{channel_id}")
            assert "notebook" in await view.text("[data-testid=cdeployments-h]")
            await browser_page.fill("#q", channel_id)
            await browser_page.press("#q", "Enter")
            await browser_page.wait_for_url(f"**/explorer/channels/{channel_id}")
            assert view.errors == []
            await browser_page.close()
