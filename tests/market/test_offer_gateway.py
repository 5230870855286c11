"""Offers that take deployments: `gateway_url` and `request_price` in the signed terms, kept
and shown by the market as signed (no migration), a malformed one refused; and the renter's
router (`consumer.sdk.deploy_route.choose_offer`) over the real market: offers with a gateway
first, then those that have the spec's image, then the cheapest; an offer whose terms refuse
the spec (no gateway, a higher request price, a smaller bundle) is never chosen."""

from __future__ import annotations

import pytest
from pycardano import PaymentSigningKey

from consumer.sdk.deploy_route import choose_offer
from consumer.sdk.errors import ConsumerError
from consumer.sdk.keys import ConsumerKey
from consumer.sdk.market_read import MarketReader
from offchain.protocol.job.jobspec import ServiceSpec
from tests.market.client import Party
from tests.market.test_lifecycle import PRICE, offer_terms
from tests.market.test_offers import offer, search

CACHED = {"reference": "unchained/sample-service:1", "digest": "sha256:" + "1" * 64}
SPEC = ServiceSpec(kind="service", image=CACHED["reference"], port=8000, price_per_request=900,
                   resources={"cpu_cores": 2, "memory_mib": 1024})  # fmt: skip


async def test_offers_name_their_gateway_and_the_router_prefers_it(http, settings):
    market = settings.identity
    await offer(http, market, price_per_unit=1, images=[CACHED])  # no gateway: cheapest
    pricey = await offer(http, market, price_per_unit=PRICE, images=[CACHED],
                         gateway_url="http://127.0.0.1:8701", request_price=900)  # fmt: skip
    cheap = await offer(http, market, price_per_unit=PRICE // 2, images=[],
                        gateway_url="https://gw.example:8702", request_price=500)  # fmt: skip
    await offer(http, market, price_per_unit=2, images=[CACHED],
                gateway_url="http://127.0.0.1:8703", request_price=901)  # fmt: skip
    await offer(http, market, price_per_unit=3, images=[CACHED], cpu_cores=1,
                gateway_url="http://127.0.0.1:8704", request_price=1)  # fmt: skip
    found = await search(http, "")
    shown = {
        o["terms"].get("gateway_url"): o["terms"].get("request_price") for o in found["offers"]
    }
    assert shown["http://127.0.0.1:8701"] == 900 and shown[None] is None

    reader = MarketReader(str(http.base_url), market, ConsumerKey(PaymentSigningKey.generate()))
    chosen = choose_offer(reader, SPEC, market)  # has the image: before the cheaper one
    assert (chosen.provider_id, chosen.gateway_url) == (
        pricey.wallet.key_hash.payload.hex(), "http://127.0.0.1:8701")  # fmt: skip
    other = SPEC.model_copy(update={"image": "unchained/other:1"})
    chosen = choose_offer(reader, other, market)  # nobody has it: the cheapest
    assert chosen.provider_id == cheap.wallet.key_hash.payload.hex()
    with pytest.raises(ConsumerError, match="no online offer takes this spec"):
        choose_offer(reader, SPEC.model_copy(update={"price_per_request": 1}), market)


async def test_a_malformed_gateway_or_request_price_is_refused(http, settings):
    provider = Party.new(http, settings.identity)
    for changes in ({"gateway_url": "ftp://x:1"}, {"gateway_url": "http://x/path"},
                    {"gateway_url": "http://" + "x" * 250}, {"request_price": -1}):  # fmt: skip
        posted = await provider.send("POST", "/offers", offer_terms(provider, **changes))
        assert posted.status_code == 422, posted.text
        assert next(iter(changes)) in posted.text
