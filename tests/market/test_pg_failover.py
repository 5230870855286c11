"""A PostgreSQL failover under a serving market, for real: a primary and its synchronous
streaming standby (`tests.market.replication`), one `unchained market serve` process on the
libpq multi-host URL of both, jobs quoted, locked, funded and delivered; the primary stopped
while the batcher settles; the market answers 503 (not 500, not a hang) and /ready names the
database; an escrow is locked on chain meanwhile; the standby promoted; the same process
reconnects by itself, finds every job it was told of, takes new ones, and settles each escrow
exactly once, the provider, the renters and the market's wallet paid to the lovelace."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Iterator

import httpx
import pytest
from pycardano import Address, Transaction

from offchain.market.models import Settlement, SettlementState
from offchain.protocol.ledger.split import settle_split
from tests.market import flow
from tests.market.client import Party
from tests.market.flow import Locked
from tests.market.postgres import server_bin
from tests.market.processes import MarketProcess
from tests.market.replication import ReplicatedPair
from tests.market.test_lifecycle import PRICE, SPEC, job_request
from tests.market.test_ready import failing, ready_until
from tests.market.test_settlement import until
from tests.protocol.onchain import balance

pytestmark = pytest.mark.postgres
SETTLE_S = 180  # generous: a 2-core machine, the settle's scripts evaluated by the devnet
NEVER_LANDED = (SettlementState.REFUSED, SettlementState.EXPIRED)


@pytest.fixture
def database_url() -> str:
    """Not the session's PostgreSQL: the test makes a replicated pair of its own."""
    return ""


@pytest.fixture
def pair() -> Iterator[ReplicatedPair]:
    bin_dir = server_bin()
    assert bin_dir is not None, "PostgreSQL is not installed: run scripts/setup.sh"
    started = ReplicatedPair(bin_dir).start()
    yield started
    started.stop()


async def test_the_market_rides_a_failover_losing_no_job_and_settling_each_once(
    devnet, market_deployment, settings, tmp_path, pair
):
    shared = settings.model_copy(update={"database_url": pair.new_database()})
    made, market = await flow.leader_settings(shared, devnet, tmp_path)
    market_before = balance(devnet, market.address)
    served = MarketProcess(made, tmp_path / "market.log").start()
    assert served.process is not None
    try:
        async with httpx.AsyncClient(base_url=served.url, timeout=60) as http:
            provider = await flow.provider_with_offer(devnet, http, made.identity)
            provider_before = balance(devnet, provider.wallet.address)
            delivered = [await flow.quote_and_lock(devnet, market_deployment, http, made.identity)
                         for _ in range(2)]  # fmt: skip
            waiting = await flow.quote_and_lock(devnet, market_deployment, http, made.identity)
            renters = {d.job: balance(devnet, d.consumer.wallet.address)
                       for d in (*delivered, waiting)}  # fmt: skip
            consumer, job = await flow.quote(devnet, http, made.identity)  # locked in the outage
            terms = await flow.escrow_terms(consumer, job)
            for deal in (*delivered, waiting):
                await flow.wait_for(deal.consumer, deal.job, "funded")
            for deal in delivered:
                await flow.deliver(provider, market_deployment, deal)
            first = delivered[0]
            recorded = await settle_recorded(first)  # on the standby too: it was committed

            pair.stop_primary()  # the settle goes on to the chain, with nobody to record it
            await ready_until(http, lambda b: "database" in failing(b), "the database down")
            await until(lambda: spent(devnet, first), SETTLE_S)  # it lands during the outage
            read = await consumer.send("GET", f"/jobs/{job}")
            newcomer = Party.new(http, made.identity)
            written = await newcomer.send("POST", "/jobs", job_request(newcomer))
            for refused in (read, written):
                assert refused.status_code == 503, refused.text
                assert refused.headers["retry-after"] == "5"
                assert "the database cannot be used now" in refused.text
            outage_lock = await flow.lock(devnet, market_deployment, consumer, job, terms)
            renters[job] = balance(devnet, consumer.wallet.address)

            pair.promote()
            body = await ready_until(http, lambda b: b["ready"], "the market on the new primary")
            assert body["checks"]["leader"]["detail"] == "this process leads"
            # every job the market was told of is there, as it was
            assert (await flow.job_status(waiting.consumer, waiting.job))["state"] == "funded"
            assert (await flow.job_status(first.consumer, first.job))["settle_tx"] == recorded
            await flow.wait_for(consumer, job, "funded")  # the follower found the outage's lock
            fresh = await flow.quote_and_lock(devnet, market_deployment, http, made.identity)
            renters[fresh.job] = balance(devnet, fresh.consumer.wallet.address)
            await flow.wait_for(fresh.consumer, fresh.job, "funded")
            for deal in (waiting, outage_lock, fresh):
                await flow.deliver(provider, market_deployment, deal)
            deals = [*delivered, waiting, outage_lock, fresh]
            settled = {}
            for deal in deals:
                status = await flow.wait_for(deal.consumer, deal.job, "settled", SETTLE_S)
                settled[deal.ref] = status["settle_tx"]
            assert settled[first.ref] == recorded  # the settle that landed in the outage
        assert served.process.poll() is None  # the same process throughout: never restarted
    finally:
        served.stop()
    assert "Exception in ASGI application" not in (tmp_path / "market.log").read_text()  # no 500
    assert_settled_once(devnet, made, deals, settled)
    before = Before(provider.wallet.address, provider_before, market.address, market_before)
    assert_paid_to_the_lovelace(devnet, made, deals, before, renters)


async def settle_recorded(deal: Locked) -> str:
    """The settle transaction the batcher recorded for the deal's escrow, once it has (the job
    settling, or settled already): it is then submitted whatever becomes of the database."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + SETTLE_S
    while (status := await flow.job_status(deal.consumer, deal.job))["state"] not in (
        "settling", "settled"
    ):  # fmt: skip
        assert loop.time() < deadline, f"no settle of {deal.job} recorded"
        await asyncio.sleep(0.1)
    return status["settle_tx"]


def spent(devnet, deal: Locked) -> bool:
    """Whether the deal's escrow is spent on chain."""
    return (
        devnet.context().utxo_by_tx_id(deal.lock.id.payload.hex(), deal.escrow.input.index) is None
    )


def assert_settled_once(devnet, settings, deals: list[Locked], settled: dict[str, str]) -> None:
    """Each escrow is in exactly one settle transaction that could land (one the ledger
    refused, or one that expired, never could): the one its job shows, which the chain took,
    spending the escrow."""
    rows = flow.stored(settings, Settlement)  # read on the new primary, through the same URL
    shown = [(s.tx_id[:16], s.state, s.escrows) for s in rows]
    assert all(s.state != SettlementState.CONFLICTED for s in rows), shown
    for deal in deals:
        live = [s for s in rows if deal.ref in json.loads(s.escrows)
                and s.state not in NEVER_LANDED]  # fmt: skip
        assert [(s.tx_id, s.state) for s in live] == [
            (settled[deal.ref], SettlementState.CONFIRMED)
        ], shown
        assert spent(devnet, deal)
        body = Transaction.from_cbor(bytes.fromhex(live[0].tx_cbor)).transaction_body
        assert deal.escrow.input in body.inputs


@dataclasses.dataclass(frozen=True)
class Before:
    """The provider's and the market wallet's balances before any settle."""

    provider: Address
    provider_lovelace: int
    market: Address
    market_lovelace: int


def assert_paid_to_the_lovelace(
    devnet, settings, deals: list[Locked], before: Before, renters: dict[str, int]
) -> None:
    """The provider was paid each job's due once, each renter its refund once (from its balance
    after its lock), and the market's wallet took each fee allowance less the fees of the
    settles that landed."""
    splits = [
        settle_split(d.escrow.output.amount.coin, PRICE, flow.UNITS, SPEC["max_duration_s"],
                     d.fee_allowance)
        for d in deals
    ]  # fmt: skip
    paid = sum(s.provider for s in splits)
    assert balance(devnet, before.provider) == before.provider_lovelace + paid
    for deal, split in zip(deals, splits, strict=True):
        refunded = balance(devnet, deal.consumer.wallet.address) - renters[deal.job]
        assert refunded == split.consumer, deal.job
    rows = flow.stored(settings, Settlement)
    confirmed = [s for s in rows if s.state == SettlementState.CONFIRMED]
    fees = sum(Transaction.from_cbor(bytes.fromhex(s.tx_cbor)).transaction_body.fee
               for s in confirmed)  # fmt: skip
    taken = sum(s.fee for s in splits) - fees
    assert balance(devnet, before.market) == before.market_lovelace + taken
