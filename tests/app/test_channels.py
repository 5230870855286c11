"""A payment channel from the browser with the test CIP-30 wallet on the devnet market: a
provider chosen from the online offers that have a gateway (its signed terms shown), the open
built from the wallet's UTxOs naming another IOU key, decoded and compared in the page, signed
and submitted; a top-up a misbehaving market tampers with (refused, the wallet never asked),
then the honest one; the close started, a drain refused before its close period ends, and
after the devnet's clock moves past it, the drain; the wallet's balance exact to the lovelace
(only the fees spent). The provider reports an endpoint on the channel: the endpoints page
lists it, its planted reason shown as text. Each page photographed at phone width with no
console error."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from pycardano import Network, PaymentSigningKey, Transaction, TransactionOutput

from offchain.market.explorer.format import ada
from offchain.market.services.offers import key_hash
from offchain.protocol.api.rental_report import REPORT_PATH
from offchain.protocol.ledger.amounts import ADA
from offchain.protocol.tx.txbuild import Wallet
from tests.app.renter import Renter, tampering
from tests.consumer.test_sdk import travel_past
from tests.market.client import Party, serve
from tests.market.database import served_at_head
from tests.market.flow import provider_with_offer
from tests.market.test_deployment_reports import row
from tests.market.test_lifecycle import offer_terms
from tests.protocol.onchain import balance, wallet
from tests.provider.daemon_harness import quiet_market
from tests.wallet.wallet import BrowserWallet

pytestmark = [pytest.mark.devnet, pytest.mark.timeout(240)]
GATEWAY = "http://gpu.example:8443"
REFUSED = "Failed to load resource: the server responded with a status of 409 (Conflict)"
PLANTED = '<img src=x onerror="window.pwned=1">'


async def shown(renter: Renter, selector: str, text: str) -> None:
    await renter.page.locator(selector, has_text=text).first.wait_for(timeout=60_000)


async def test_a_channel_opened_topped_up_closed_and_drained_from_the_browser(
    devnet, browser, artifacts, tmp_path
):
    _, _, settings = await quiet_market(devnet, tmp_path)
    with serve(served_at_head(settings)) as url:
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            provider = Party.new(http, settings.identity, await wallet(devnet))
            terms = offer_terms(
                provider, gateway_url=GATEWAY, request_price=1_000, token_prices=[2, 8]
            )
            offered = await provider.send("POST", "/offers", terms)
            assert offered.status_code == 201, offered.text
            await provider_with_offer(devnet, http, settings.identity)  # no gateway: not listed
            provider_id = key_hash(provider.wallet.vkey)
            funded = await wallet(devnet, 100 * ADA)
            renter = await Renter.open(browser, BrowserWallet(funded, devnet.url), url, artifacts)
            page, start = renter.page, balance(devnet, funded.address)
            await renter.connect()

            # the open, to the one provider with a gateway, IOUs signed by another key
            await renter.visit("/app/channels")
            await shown(renter, "#terms", provider_id)
            assert await page.locator("#offer option").all_inner_texts() == [
                f"{GATEWAY} · {provider_id[:10]}…"
            ]
            assert GATEWAY in await renter.text("#terms")
            assert ("at least 2.000000 ADA in, 8.000000 ADA out, per million tokens"
                    in await renter.text("#terms"))  # fmt: skip
            assert "CIP-30 wallet cannot" in await renter.text("[data-testid=iou-note]")
            iou_key = PaymentSigningKey.generate().to_verification_key().payload.hex()
            await page.fill("#deposit", "5")
            await page.fill("#close-period", "30")
            await page.fill("#iou-key", iou_key)
            await renter.sign_after_review("#open", "channels-open")
            await renter.said("Submitted")
            await shown(renter, "#channels .state", "open")
            card = page.locator("#channels [data-channel]").first
            channel_id = await card.get_attribute("data-channel")
            assert channel_id is not None
            channel = (await http.get(f"/api/explorer/channels/{channel_id}")).json()["channel"]
            assert channel["renter_vkey"] == iou_key and channel["provider_id"] == provider_id
            assert channel["renter"] == str(funded.address)
            deposit = channel["remaining"]
            assert 5 * ADA < deposit < 7 * ADA  # the deposit and its return deposit

            # a misbehaving market: the top-up's change paid to a stranger; never signed
            stranger = Wallet.of(PaymentSigningKey.generate(), Network.TESTNET).address
            moved: list[int] = []

            def pay_a_stranger(outputs: list[TransactionOutput]) -> None:
                moved.append(outputs[1].amount.coin)
                outputs[1] = TransactionOutput(stranger, outputs[1].amount)

            await page.route("**/top-up/build", tampering(pay_a_stranger))
            await page.click("#channels [data-action=top-up]")
            await page.locator("#differs li").first.wait_for()
            assert await page.locator("#differs li").all_inner_texts() == [
                f"{ada(moved[0])} goes to {stranger}, not your wallet"
            ]
            assert await page.locator("#sign").is_hidden()
            await renter.said("Not signed")
            await renter.shoot("channels-top-up-tampered")
            await page.unroute("**/top-up/build")
            assert len(renter.wallet.signed) == 1

            # the honest top-up of 2 ADA
            await renter.sign_after_review("#channels [data-action=top-up]", "channels-top-up")
            await renter.said("Submitted")
            await shown(renter, "#channels .remaining", f"{ada(deposit + 2 * ADA)} left")

            # the endpoint the provider runs on it, as it reports it
            endpoint = row("chat", channel=channel_id, state="running", requests=7,
                           served=7_000, seconds_run=2, reason=PLANTED)  # fmt: skip
            reported = await provider.send("POST", REPORT_PATH, {"deployments": [endpoint]})
            assert reported.status_code == 200, reported.text
            await renter.visit("/app/endpoints")
            await shown(renter, "#endpoints .name", "chat")
            assert await renter.text("#endpoints .state") == "running"
            assert await renter.text("#endpoints .reason") == PLANTED
            assert await renter.text("#endpoints .requests") == "7"
            assert await renter.text("#endpoints .seconds") == "2 s"
            assert await renter.text("#endpoints .served") == ada(7_000)
            assert await renter.text("#endpoints .claimed") == f"{ada(0)} (open)"
            href = await page.locator("#endpoints a.name").get_attribute("href")
            assert href is not None and href.startswith("/explorer/deployments/")
            assert await page.evaluate("window.pwned") is None
            await renter.shoot("endpoints")

            # the close started; a drain before its period ends is refused by the market
            await renter.visit("/app/channels")
            await renter.sign_after_review("#channels [data-action=close]", "channels-close")
            await renter.said("Submitted")
            await shown(renter, "#channels .state", "closing")
            await page.click("#channels [data-action=drain]")
            await renter.said("The market refused (409)")
            for _ in range(50):  # Chromium logs the answer the market refused, in its time
                if renter.errors:
                    break
                await asyncio.sleep(0.1)
            assert renter.errors == [REFUSED]
            renter.errors.clear()
            await renter.shoot("channels-closing")
            closing_at = (await http.get(f"/api/explorer/channels/{channel_id}")).json()[
                "channel"]["closing_at_ms"]  # fmt: skip

            # past the close period: drained, everything but the fees back in the wallet
            await travel_past(devnet, closing_at)
            await renter.sign_after_review("#channels [data-action=drain]", "channels-drain")
            await renter.said("Submitted")
            await shown(renter, "#channels .state", "drained")
            await renter.shoot("channels-drained")
            signed = [Transaction.from_cbor(tx) for tx in renter.wallet.signed]
            assert len(signed) == 4  # open, top-up, start of close, drain
            fees = sum(tx.transaction_body.fee for tx in signed)
            assert balance(devnet, funded.address) == start - fees
            assert renter.errors == []
            await page.close()
