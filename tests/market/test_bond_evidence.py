"""Bonds read as evidence by the market, on the devnet: the chain follower takes a bond output
naming a provider's key as that provider's bond only if it passes the bond check, so a bond
withdrawable at once (`unbonding_since = Just 0`) or holding tokens is neither matched nor shown
as a bond, while a good one is; a job closing later than a bond's notice covers is not
matched; a counted bond that moves into an output withdrawable at once (topped up after its
notice ended) is shown refused."""

from __future__ import annotations

import asyncio

import httpx
from sqlmodel import col

from offchain.market.models import Bond, Provider
from offchain.market.settings import MarketSettings
from offchain.protocol.ledger.addresses import to_plutus
from offchain.protocol.ledger.types import BondDatum, Just
from offchain.protocol.tx import bond as bonds
from offchain.protocol.tx.txbuild import out_ref
from tests.market.client import Party, serve
from tests.market.flow import stored
from tests.market.test_lifecycle import PRICE, job_request, offer_terms
from tests.protocol.evidence import place
from tests.protocol.onchain import (
    ADA,
    BOND,
    NOTICE_MS,
    bond_with_tokens,
    confirm,
    output,
    post_bond,
    travel_to,
    wallet,
)

MIN_BOND = 100 * ADA


def provider_id(party: Party) -> str:
    return party.wallet.key_hash.payload.hex()


async def bond_state(settings: MarketSettings, party: Party, state: str) -> Provider:
    """The provider's row once the follower has given its bond `state` (polled)."""
    loop = asyncio.get_running_loop()
    until = loop.time() + 60
    while True:
        (row,) = stored(settings, Provider, col(Provider.id) == provider_id(party))
        if row.bond_state == state:
            return row
        assert loop.time() < until, f"the provider's bond is {row.bond_state}, not {state}"
        await asyncio.sleep(0.2)


async def test_only_a_bond_that_passes_the_bond_check_counts(
    devnet, market_deployment, settings, tmp_path
):
    strict = settings.model_copy(
        update={"min_bond_lovelace": MIN_BOND, "data_dir": tmp_path / "bonded"}
    )
    with serve(strict) as url:
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            market = strict.identity
            at_once, tokened, good = [Party.new(http, market, await wallet(devnet)) for _ in "abc"]
            # the bad bonds' providers are the cheaper: counted, they would get the job
            for party, price in ((at_once, PRICE - 2), (tokened, PRICE - 1), (good, PRICE)):
                terms = offer_terms(party, price_per_unit=price)
                posted = await party.send("POST", "/offers", terms)
                assert posted.status_code == 201, posted.text

            mine = at_once.wallet
            withdrawable = BondDatum(to_plutus(mine.address), mine.vkey, Just(0))
            at = market_deployment.bond_address(mine.address)
            await place(devnet, mine, at, BOND, withdrawable)
            await bond_with_tokens(devnet, market_deployment, tokened.wallet)
            bond = await post_bond(devnet, market_deployment, good.wallet)
            counted = await bond_state(strict, good, "active")  # past the bad ones' blocks
            assert (counted.bond_ref, counted.bond_lovelace) == (out_ref(bond), BOND)
            for bad in (at_once, tokened):
                (row,) = stored(strict, Provider, col(Provider.id) == provider_id(bad))
                assert (row.bond_ref, row.bond_state) == (None, None)
                assert stored(strict, Bond, col(Bond.provider_id) == provider_id(bad)) == []
                page = await http.get(f"/api/explorer/providers/{provider_id(bad)}")
                assert page.json()["provider"]["bond"]["state"] is None
                assert page.json()["bonds"] == []

            consumer = Party.new(http, market)
            quoted = await consumer.send("POST", "/jobs", job_request(consumer))
            assert quoted.status_code == 201, quoted.text
            assert quoted.json()["offer"]["provider_id"] == provider_id(good)
            # issue 18 B: a job whose close (+ refund window) outlasts a notice begun now is
            # not matched: its provider could withdraw the bond before the consumer slashes
            outlasting = job_request(consumer, max_duration_s=NOTICE_MS // 1000)
            refused = await consumer.send("POST", "/jobs", outlasting)
            assert refused.status_code == 409, refused.text
            assert "no bond can back this job" in refused.text and "max_duration_s" in refused.text

            unbond = bonds.begin_unbond(
                devnet.context(), market_deployment, bond, good.wallet.address
            )
            bond = output(await confirm(devnet, good.wallet.sign(unbond)), bonds.BOND_OUTPUT)
            await bond_state(strict, good, "unbonding")
            since = bonds.bond_datum(market_deployment, bond).unbonding_since.value
            await travel_to(devnet, since + NOTICE_MS + 1_000)
            topped = bonds.top_up(  # the provider's own (a top-up needs its signature)
                devnet.context(), market_deployment, bond, good.wallet.address, ADA
            )
            await confirm(devnet, good.wallet.sign(topped))
            await bond_state(strict, good, "refused")  # withdrawable at once: no bond
