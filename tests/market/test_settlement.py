"""The leader's work on the session's devnet, over real HTTP, on SQLite and PostgreSQL: the chain
follower finds escrows nobody reported and funds them after their confirmations, the batcher
settles verified receipts from the market's own wallet (balances to the lovelace), quotes
expire, and providers that stop beating go offline."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator, Callable

import httpx
import pytest
from pycardano import ExecutionUnits, Transaction, TransactionInput

from devnet.genesis import ADA
from offchain.chain.utxo import parse_out_ref
from offchain.market.db import make_engine
from offchain.market.models import (
    Cause,
    Provider,
    ProviderReputation,
    Settlement,
    SettlementState,
)
from offchain.market.services import settlement
from offchain.market.services.chain import Chain
from offchain.market.settings import MarketSettings
from offchain.protocol.ledger.split import settle_split
from offchain.protocol.tx.budgets import ExecutionBudgets
from offchain.protocol.tx.txbuild import Wallet
from tests.market.client import Party, serve
from tests.market.flow import (
    UNITS,
    Locked,
    deliver,
    leader_settings,
    lock,
    provider_with_offer,
    quote,
    quote_and_lock,
    stored,
    timeline,
    wait_for,
)
from tests.market.test_lifecycle import PRICE, SPEC
from tests.protocol.onchain import balance, fund, height_on_chain


@pytest.fixture
async def leader(
    request, settings, devnet, tmp_path
) -> AsyncIterator[tuple[MarketSettings, Wallet, str]]:
    """A leading market; a test parametrizes it (indirectly) with changes to its settings."""
    made, market = await leader_settings(
        settings, devnet, tmp_path, **getattr(request, "param", {})
    )
    with serve(made) as url:
        yield made, market, url


async def funded_deals(devnet, deployment, http, identity: str, count: int) -> list[Locked]:
    """`count` jobs quoted, locked by their consumers and funded by the follower."""
    deals = [await quote_and_lock(devnet, deployment, http, identity) for _ in range(count)]
    for deal in deals:
        await wait_for(deal.consumer, deal.job, "funded")
    return deals


async def test_follower_funds_and_the_batcher_settles_to_the_lovelace(
    devnet, market_deployment, leader
):
    settings, market, url = leader
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        provider = await provider_with_offer(devnet, http, settings.identity)
        deals = await funded_deals(devnet, market_deployment, http, settings.identity, 3)
        before = {
            "provider": balance(devnet, provider.wallet.address),
            "market": balance(devnet, market.address),
            **{deal.job: balance(devnet, deal.consumer.wallet.address) for deal in deals},
        }
        for deal in deals:
            await deliver(provider, market_deployment, deal)
        settled = [await wait_for(deal.consumer, deal.job, "settled") for deal in deals]

    settlements = stored(settings, Settlement)
    assert {s.state for s in settlements} == {SettlementState.CONFIRMED}
    escrows = [ref for s in settlements for ref in json.loads(s.escrows)]
    assert sorted(escrows) == sorted(deal.ref for deal in deals)  # each escrow in one tx
    for deal, status in zip(deals, settled, strict=True):
        assert status["settle_tx"] in {s.tx_id for s in settlements}
        assert devnet.context().utxo_by_tx_id(deal.lock.id.payload.hex(), 0) is None
        events = timeline(settings, deal.job)
        funded = [e for e in events if e.to_state == "funded"][-1]  # the last, after forks
        assert funded.cause == Cause.CHAIN and funded.tx_id == deal.lock.id.payload.hex()
        lock_height = await height_on_chain(devnet, funded.tx_id, deal.block)
        assert funded.block_height == lock_height + settings.confirmations  # blocks on top
        assert events[-1].cause == Cause.CHAIN and events[-1].tx_id == status["settle_tx"]

    lovelace = deals[0].escrow.output.amount.coin
    split = settle_split(lovelace, PRICE, UNITS, SPEC["max_duration_s"], deals[0].fee_allowance)
    assert balance(devnet, provider.wallet.address) == before["provider"] + 3 * split.provider
    for deal in deals:
        assert balance(devnet, deal.consumer.wallet.address) == before[deal.job] + split.consumer
    fees = sum(Transaction.from_cbor(bytes.fromhex(s.tx_cbor)).transaction_body.fee
               for s in settlements)  # fmt: skip
    assert balance(devnet, market.address) == before["market"] + 3 * split.fee - fees
    # the provider's record counts each escrow once, however many forks replayed its settle
    (record,) = stored(settings, ProviderReputation)
    assert record.provider_id == provider.wallet.key_hash.payload.hex()
    assert (record.delivered, record.failed, record.refunded) == (3, 0, 0)


@dataclasses.dataclass
class StarvedOnce(ExecutionBudgets):
    """A stand-in for remembered units that have become too small (scripts dearer than when
    they were learned): the batcher's first batch declares far too few."""

    starved: bool = False

    def redeemers(self, keyed):
        if not self.starved:
            self.starved = True
            self.units = {key: ExecutionUnits(1_000, 1_000_000) for key, _ in keyed}
        return super().redeemers(keyed)


@pytest.fixture
def starved_budgets(monkeypatch) -> None:
    monkeypatch.setattr(settlement, "ExecutionBudgets", StarvedOnce)


ONE_BATCH_OF_TWO = {"settle_batch_max": 2, "settle_wait_ms": 60_000}


@pytest.mark.parametrize("leader", [ONE_BATCH_OF_TWO], indirect=True)
async def test_a_batch_refused_for_its_remembered_units_is_evaluated_and_settled_once(
    devnet, market_deployment, starved_budgets, leader
):
    settings, _, url = leader
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        provider = await provider_with_offer(devnet, http, settings.identity)
        deals = await funded_deals(devnet, market_deployment, http, settings.identity, 2)
        before = balance(devnet, provider.wallet.address)
        for deal in deals:
            await deliver(provider, market_deployment, deal)
        settled = [await wait_for(deal.consumer, deal.job, "settled") for deal in deals]

    rows = stored(settings, Settlement)
    refused = [s for s in rows if s.state == SettlementState.REFUSED]
    confirmed = [s for s in rows if s.state == SettlementState.CONFIRMED]
    assert len(refused) == 1 and len(confirmed) == 1 and len(rows) == 2
    assert sorted(json.loads(refused[0].escrows)) == sorted(deal.ref for deal in deals)
    assert {status["settle_tx"] for status in settled} == {confirmed[0].tx_id}
    details = [e.detail for deal in deals for e in timeline(settings, deal.job)]
    assert any("ran out of its budget" in detail for detail in details)
    lovelace = deals[0].escrow.output.amount.coin
    split = settle_split(lovelace, PRICE, UNITS, SPEC["max_duration_s"], deals[0].fee_allowance)
    assert balance(devnet, provider.wallet.address) == before + 2 * split.provider  # once


async def test_settlements_in_flight_pay_from_separate_wallet_utxos(
    devnet, market_deployment, settings, tmp_path
):
    """A market wallet funded in two outputs keeps two settle transactions in flight, each
    paying from its own UTxO; a third batch waits for one to land. The follower is stopped
    while the batcher runs, so neither of the two counts as landed however fast the chain is."""
    made, market = await leader_settings(
        settings, devnet, tmp_path, settle_batch_max=1, settle_in_flight_max=2
    )
    await fund(devnet, market.address, 1_000 * ADA)  # the wallet's second fee UTxO
    with serve(made.model_copy(update={"wallet_key": None})) as url:  # funds, settles nothing
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            provider = await provider_with_offer(devnet, http, settings.identity)
            deals = await funded_deals(devnet, market_deployment, http, settings.identity, 3)
            for deal in deals:
                await deliver(provider, market_deployment, deal)
                await wait_for(deal.consumer, deal.job, "completed")
    before = balance(devnet, market.address)
    wallet_utxos = {u.input for u in devnet.context().utxos(market.address)}
    engine = make_engine(made)
    batcher = settlement.Batcher(
        engine, Chain.connect(made.ogmios_url, made.deployment), market, made
    )
    for _ in range(3):
        await asyncio.to_thread(batcher.run)
    engine.dispose()

    in_flight = stored(made, Settlement)
    assert [s.state for s in in_flight] == [SettlementState.SUBMITTED] * 2
    first, second = (settlement._spends(s.tx_cbor) for s in in_flight)
    assert not first & second  # in flight together: no UTxO spent by both, collateral included
    paid_from_the_wallet(in_flight, wallet_utxos, market)
    with serve(made) as url:  # the follower sees both land, the third batch follows
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            settled = [
                await wait_for(Party.new(http, made.identity, d.consumer.wallet), d.job, "settled")
                for d in deals
            ]
    rows = stored(made, Settlement)
    assert {s.state for s in rows} == {SettlementState.CONFIRMED} and len(rows) == 3
    paid_from_the_wallet(rows, wallet_utxos, market)
    assert {status["settle_tx"] for status in settled} == {s.tx_id for s in rows}
    fees = sum(Transaction.from_cbor(bytes.fromhex(s.tx_cbor)).transaction_body.fee
               for s in rows)  # fmt: skip
    lovelace = deals[0].escrow.output.amount.coin
    split = settle_split(lovelace, PRICE, UNITS, SPEC["max_duration_s"], deals[0].fee_allowance)
    assert balance(devnet, market.address) == before + 3 * split.fee - fees
    # each escrow settled alone: its whole fee is within the allowance's share for it
    assert all(Transaction.from_cbor(bytes.fromhex(s.tx_cbor)).transaction_body.fee
               <= made.settle_fee_share for s in rows)  # fmt: skip


def paid_from_the_wallet(
    rows: list[Settlement], start: set[TransactionInput], wallet: Wallet
) -> None:
    """Each settle, in the order built, paid its fee (and collateral) from the wallet's UTxOs as
    they were then: those at `start`, less what the settles before it spent, plus their change. A
    settle built after another landed may pay from that one's change, a UTxO `start` lacks."""
    utxos = set(start)
    for row in sorted(rows, key=lambda s: s.created_at_ms):
        escrow_inputs = {parse_out_ref(ref) for ref in json.loads(row.escrows)}
        own = settlement._spends(row.tx_cbor) - escrow_inputs
        assert own and own <= utxos, f"{row.tx_id} pays from {own}, the wallet held {utxos}"
        tx = Transaction.from_cbor(bytes.fromhex(row.tx_cbor))
        body = tx.transaction_body
        utxos -= set(body.inputs)
        utxos |= {
            TransactionInput(tx.id, index)
            for index, out in enumerate(body.outputs)
            if out.address == wallet.address
        }


@pytest.mark.parametrize("leader", [{"quote_ttl_ms": 2000}], indirect=True)
async def test_an_unlocked_quote_expires_and_a_late_lock_still_funds_it(
    devnet, market_deployment, leader
):
    settings, _, url = leader
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        await provider_with_offer(devnet, http, settings.identity)
        consumer, job = await quote(devnet, http, settings.identity)
        await wait_for(consumer, job, "expired")
        late = await lock(devnet, market_deployment, consumer, job)
        await wait_for(consumer, job, "funded")
    states = [e.to_state for e in timeline(settings, late.job)]
    assert states == ["requested", "quoted", "expired", "funded"]


@pytest.mark.parametrize("leader", [{"online_ms": 1000}], indirect=True)
async def test_a_provider_that_stops_beating_goes_offline_and_comes_back(devnet, leader):
    settings, _, url = leader
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        provider = await provider_with_offer(devnet, http, settings.identity)
        mine = Provider.id == provider.wallet.key_hash.payload.hex()
        await until(lambda: stored(settings, Provider, mine)[0].offline_since_ms is not None)
        (row,) = stored(settings, Provider, mine)
        assert row.offline_since_ms == row.last_heartbeat_ms + settings.online_ms
        assert (await provider.send("POST", "/providers/heartbeat")).status_code == 204
        await until(lambda: stored(settings, Provider, mine)[0].offline_since_ms is None)


async def until(check: Callable[[], bool], timeout_s: float = 30) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not check():
        assert loop.time() < deadline, "not within the time allowed"
        await asyncio.sleep(0.2)
