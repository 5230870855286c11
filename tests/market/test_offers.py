"""Offers over real HTTP on the devnet: searched with the query language (sorted, limited, a bad
term named), a job with no match answered with why (per requirement, offers away counted by
why), a provider's slots never promised twice, and a named bond that must count."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from offchain.market.services import offers
from offchain.market.settings import MarketSettings
from offchain.protocol.ledger.payloads import acceptance_payload, sign
from offchain.protocol.tx import escrow as escrows
from offchain.protocol.tx.deployment import Deployment
from offchain.protocol.tx.txbuild import out_ref
from tests.market.client import Party, serve
from tests.market.flow import Locked, lock, send_receipt
from tests.market.test_lifecycle import GPU, PRICE, job_request, offer_terms
from tests.protocol.onchain import ADA, post_bond, wallet

RTX = "NVIDIA GeForce RTX 4090"


async def offer(http: httpx.AsyncClient, market: str, **changes) -> Party:
    """A new provider with one offer (its key holds no funds: posting costs nothing)."""
    provider = Party.new(http, market)
    posted = await provider.send("POST", "/offers", offer_terms(provider, **changes))
    assert posted.status_code == 201, posted.text
    return provider


async def search(http: httpx.AsyncClient, query: str, **params) -> dict:
    found = await http.get("/offers", params={"query": query, **params})
    assert found.status_code == 200, found.text
    return found.json()


def refused(answer: httpx.Response, status: int, field: str) -> str:
    """The refusal's message, once it is `status` naming `field`."""
    assert answer.status_code == status, answer.text
    (problem,) = answer.json()["detail"]
    assert problem["loc"] == [field], problem
    return problem["msg"]


async def test_offers_are_searched_sorted_and_limited_and_a_bad_term_is_named(http, settings):
    market = settings.identity
    h100 = await offer(http, market)
    small = await offer(http, market, gpu_model=RTX, gpu_count=2, vram_mib=24_564,
                        price_per_unit=20_000)  # fmt: skip
    large = await offer(http, market, gpu_model=RTX, gpu_count=4, vram_mib=24_564,
                        price_per_unit=30_000, slots=2)  # fmt: skip
    ids = {h100.wallet.key_hash.payload.hex(): "h100", small.wallet.key_hash.payload.hex():
           "small", large.wallet.key_hash.payload.hex(): "large"}  # fmt: skip

    def names(found: dict) -> list[str]:
        return [ids[signed["provider_id"]] for signed in found["offers"]]

    assert names(await search(http, "")) == ["small", "large", "h100"]  # cheapest first
    assert names(await search(http, "gpu_model=RTX_4090 gpus>=2 sort=-gpus")) == ["large", "small"]
    assert names(await search(http, "sort=-vram,price")) == ["h100", "small", "large"]
    assert names(await search(http, "price<=100ADA/h")) == ["small"]  # 72 ADA/h; 108 is over
    limited = await search(http, "vram>=20GiB", limit=1)
    assert names(limited) == ["small"] and limited["matched"] == 3 and limited["why_none"] is None
    signed = limited["offers"][0]
    assert signed["terms"]["price_per_unit"] == 20_000 and signed["body"].startswith("{")

    none = await search(http, "gpus>=2 vram>=40GiB")
    assert none["offers"] == [] and none["total"] == 3
    assert none["why_none"] == (
        "2 of the 3 online offers have gpus>=2, none of those has vram>=40GiB "
        "(the closest: 23.98828125GiB)"
    )
    for term, says in [
        ("colour=red", "unknown field 'colour'"),
        ("vram>=24GB", "a size"),
        ("sort=speed", "unknown sort key 'speed'"),
        ("gpus=>2", "operator"),
    ]:
        answer = await http.get("/offers", params={"query": f"gpus>=1 {term}"})
        message = refused(answer, 422, "query")
        assert term in message and says in message, message


async def test_a_job_with_no_match_is_told_why_per_requirement(settings, tmp_path):
    # the first offer goes offline; the next two must stay online until the last request,
    # even on a loaded machine (1 s was once too short for PostgreSQL under a full CI run)
    quick = settings.model_copy(update={"online_ms": 4000, "data_dir": tmp_path / "quick"})
    with serve(quick) as url:
        async with httpx.AsyncClient(base_url=url, timeout=60) as client:
            await offer(client, quick.identity, gpu_model="old", price_per_unit=1)
            await asyncio.sleep(4.2)  # that provider is offline from now
            await offer(client, quick.identity)
            await offer(client, quick.identity, gpu_model=RTX, vram_mib=24_564)
            consumer = Party.new(client, quick.identity)
            cheap = job_request(consumer, max_price_lovelace=29_000_000)
            message = refused(await consumer.send("POST", "/jobs", cheap), 409, "spec")
            assert message == (  # the price in the renter's units, per hour
                "no offer can take the job: 2 of the 2 online offers have gpus>=1, 1 of those "
                "has vram>=40000MiB, 1 of those has cpu>=2, 1 of those has memory>=4096MiB, 1 "
                "of those has disk>=1024MiB, your max price 174.000000 ADA/h (29.000000 ADA for "
                "up to 600 s) is below 180.000000 ADA/h, the price of the cheapest of those; 1 "
                "offline"
            )
            other = {**job_request(consumer), "gpu_model": "NVIDIA H100 80GB HBM3 Ti"}
            message = refused(await consumer.send("POST", "/jobs", other), 409, "spec")
            assert "none of the 2 online offers has gpu_model='NVIDIA H100" in message
            exact = {**job_request(consumer), "gpu_model": "nvidia_h100_80gb_HBM3"}
            quoted = await consumer.send("POST", "/jobs", exact)
            assert quoted.status_code == 201 and quoted.json()["gpu_model"] == GPU, quoted.text


async def test_a_quote_reads_every_offer_when_the_cheapest_few_cannot_take_the_job(
    http, settings, monkeypatch
):
    """A quote first reads only the cheapest offers that could take the job (LIKELY of them);
    when none of those can (here: another GPU model than asked), it reads them all."""
    monkeypatch.setattr(offers, "LIKELY", 2)
    cheap = [await offer(http, settings.identity, gpu_model="NVIDIA LIKELY A",
                         price_per_unit=PRICE // 5)
             for _ in range(2)]  # fmt: skip
    await offer(http, settings.identity, gpu_model="NVIDIA LIKELY B", price_per_unit=PRICE)
    consumer = Party.new(http, settings.identity)
    asked = {**job_request(consumer), "gpu_model": "NVIDIA LIKELY B"}
    quoted = await consumer.send("POST", "/jobs", asked)
    assert quoted.status_code == 201, quoted.text
    quote = quoted.json()
    assert (quote["gpu_model"], quote["price_per_unit"]) == ("NVIDIA LIKELY B", PRICE)

    anything = await consumer.send("POST", "/jobs", job_request(consumer))  # the cheapest two
    assert anything.status_code == 201, anything.text
    assert anything.json()["offer"]["provider_id"] == cheap[1].wallet.key_hash.payload.hex()


async def test_a_job_goes_to_the_cheapest_offer_that_has_its_image(http, settings):
    """Offers list the images their machines have: a job is quoted on the cheapest offer with
    its image (an offer listing none runs none, one that pulls runs any), and refused, naming
    the images offered, when no offer meeting the rest has it."""
    model = "NVIDIA IMAGES A"
    await offer(http, settings.identity, gpu_model=model, price_per_unit=PRICE // 4, images=None)
    await offer(
        http,
        settings.identity,
        gpu_model=model,
        price_per_unit=PRICE // 3,
        images=[{"reference": "unchained/busybox:1", "digest": "sha256:" + "0" * 64}],
    )
    has = await offer(http, settings.identity, gpu_model=model, price_per_unit=PRICE // 2)
    consumer = Party.new(http, settings.identity)
    asked = {**job_request(consumer), "gpu_model": model}
    quoted = await consumer.send("POST", "/jobs", asked)
    assert quoted.status_code == 201, quoted.text
    assert quoted.json()["offer"]["provider_id"] == has.wallet.key_hash.payload.hex()

    slim = {**asked, "spec": {**asked["spec"], "image": "python:3.11-slim"}}
    answer = await consumer.send("POST", "/jobs", slim)
    assert answer.status_code == 409, answer.text
    assert answer.json()["detail"] == [{"loc": ["spec", "image"], "type": "Conflict", "msg": (
        "no offer can take the job: no provider has image python:3.11-slim; images offered by "
        "the 3 online offers that meet the rest of the job: python:3.11, unchained/busybox:1"
    )}]  # fmt: skip
    pulls = await offer(http, settings.identity, gpu_model=model, price_per_unit=PRICE,
                        images=[], pulls_images=True)  # fmt: skip
    quoted = await consumer.send("POST", "/jobs", slim)
    assert quoted.status_code == 201, quoted.text
    assert quoted.json()["offer"]["provider_id"] == pulls.wallet.key_hash.payload.hex()


async def test_signed_paths_and_queries_are_the_bytes_sent(http, settings):
    """httpx percent-encodes the path and query; the market checks the signature against the
    raw bytes it received, so neither side re-encodes anything."""
    provider = await offer(http, settings.identity)
    found = await provider.send("GET", "/providers/assignments?timeout_s=0&note=a b>c/é")
    assert found.status_code == 200 and found.json() == [], found.text
    missing = await provider.send("GET", "/jobs/no such job?x=%41")
    assert missing.status_code == 404, missing.text


async def accept(provider: Party, deployment: Deployment, locked: Locked) -> None:
    job_id = escrows.escrow_datum(deployment, locked.escrow).job_id
    payload = acceptance_payload(deployment.network_id, deployment.escrow_hash,
                                 locked.escrow.input, job_id, deployment.bond_hash)  # fmt: skip
    body = {"signature": sign(provider.wallet.key, payload).hex()}
    accepted = await provider.send("POST", f"/jobs/{locked.job}/acceptance", body)
    assert accepted.json()["state"] == "accepted", accepted.text


async def funded(devnet, deployment: Deployment, http: httpx.AsyncClient, market: str) -> Locked:
    """A consumer's job quoted, locked on chain and reported: funded."""
    consumer = Party.new(http, market, await wallet(devnet))
    quoted = await consumer.send("POST", "/jobs", job_request(consumer))
    assert quoted.status_code == 201, quoted.text
    locked = await lock(devnet, deployment, consumer, quoted.json()["job_id"])
    reported = await consumer.send("POST", f"/jobs/{locked.job}/escrow", {"escrow": locked.ref})
    assert reported.json()["state"] == "funded", reported.text
    return locked


async def test_a_provider_is_never_promised_beyond_its_slots(
    devnet, market_deployment, http, settings
):
    market = settings.identity
    provider = Party.new(http, market, await wallet(devnet))
    posted = await provider.send("POST", "/offers", offer_terms(provider, slots=2))
    assert posted.status_code == 201, posted.text
    first = await funded(devnet, market_deployment, http, market)
    await accept(provider, market_deployment, first)
    second = await funded(devnet, market_deployment, http, market)  # one slot of two is free
    await accept(provider, market_deployment, second)
    assert (await provider.send("POST", f"/jobs/{second.job}/start")).status_code == 200

    consumer = Party.new(http, market)
    message = refused(await consumer.send("POST", "/jobs", job_request(consumer)), 409, "spec")
    assert message == "no offer can take the job: none of the 1 offers can take a job now: 1 busy"
    assert (await search(http, ""))["why_none"] == "none of the 1 offers can take a job now: 1 busy"

    assert (await provider.send("POST", f"/jobs/{first.job}/start")).status_code == 200
    assert (await send_receipt(provider, market_deployment, first)).status_code == 200
    again = await consumer.send("POST", "/jobs", job_request(consumer))  # a slot is free again
    assert again.status_code == 201, again.text


@pytest.fixture
async def bonded(settings: MarketSettings, tmp_path) -> tuple[httpx.AsyncClient, MarketSettings]:
    """The market asking for a bond of at least 100 ADA."""
    strict = settings.model_copy(
        update={"min_bond_lovelace": 100 * ADA, "data_dir": tmp_path / "bonded"}
    )
    with serve(strict) as url:
        async with httpx.AsyncClient(base_url=url, timeout=60) as client:
            yield client, strict


async def test_an_offers_bond_must_count_and_reach_the_minimum(devnet, market_deployment, bonded):
    http, settings = bonded
    market = settings.identity
    unbonded = await offer(http, market)
    consumer = Party.new(http, market)
    message = refused(await consumer.send("POST", "/jobs", job_request(consumer)), 409, "spec")
    assert message.endswith("1 without a counted bond of at least 100000000 lovelace")

    provider = Party.new(http, market, await wallet(devnet))
    bond = out_ref(await post_bond(devnet, market_deployment, provider.wallet, 400 * ADA))
    posted = await provider.send("POST", "/offers", offer_terms(provider, bond=bond))
    assert posted.status_code == 201, posted.text
    quoted = await consumer.send("POST", "/jobs", job_request(consumer))
    assert quoted.json()["offer"]["provider_id"] == provider.wallet.key_hash.payload.hex()

    theirs = await unbonded.send("POST", "/offers", offer_terms(unbonded, bond=bond))
    assert "another provider's key" in refused(theirs, 422, "bond")
    poor = Party.new(http, market, await wallet(devnet))
    small = out_ref(await post_bond(devnet, market_deployment, poor.wallet, 50 * ADA))
    answer = await poor.send("POST", "/offers", offer_terms(poor, bond=small))
    assert "bond below the minimum: 50000000 < 100000000" in refused(answer, 422, "bond")
    nowhere = await poor.send("POST", "/offers", offer_terms(poor, bond="ab" * 32 + "#7"))
    assert "not an unspent output on chain" in refused(nowhere, 422, "bond")
