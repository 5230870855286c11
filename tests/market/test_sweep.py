"""The settlement wallet's sweep to a cold address (`offchain.market.services.sweep`), on the
devnet: past `sweep_above_lovelace` the batcher's round sends all but `sweep_keep_lovelace` to
`sweep_to`, the cold address gets exactly the surplus and the wallet keeps `keep - fee`, to the
lovelace; the next round sweeps nothing; an address of another network is refused at start and
a keep at or above the threshold when the settings are read."""

from __future__ import annotations

import asyncio

import pytest
from pycardano import Network, PaymentSigningKey
from pydantic import ValidationError

from devnet.genesis import ADA
from offchain.chain.follower import tip_point
from offchain.chain.ogmios import request
from offchain.market.db import make_engine
from offchain.market.errors import MarketRefusal
from offchain.market.services import settlement, sweep
from offchain.market.services.chain import Chain
from offchain.market.settings import MarketSettings
from offchain.protocol.tx.txbuild import Clock, Wallet
from tests.consumer.cli import tx_fee
from tests.market.database import served_at_head
from tests.market.flow import leader_settings
from tests.protocol.onchain import balance

KEEP = 20 * ADA


@pytest.fixture
def database_url() -> str:
    """The sweep is the wallet's: the default SQLite is enough."""
    return ""


async def swept_to(devnet, address, timeout_s: float = 60) -> str:
    """The id of the transaction that paid `address` (its one UTxO), once it is on chain."""
    loop = asyncio.get_running_loop()
    until = loop.time() + timeout_s
    while not (utxos := devnet.context().utxos(address)):
        assert loop.time() < until, f"nothing reached {address}"
        await asyncio.sleep(0.2)
    (utxo,) = utxos
    return str(utxo.input.transaction_id)


async def test_the_settlement_wallet_sweeps_its_surplus_to_a_cold_address(
    devnet, settings, tmp_path
):
    cold = Wallet.of(PaymentSigningKey.generate(), Network.TESTNET).address
    made, market = await leader_settings(
        served_at_head(settings), devnet, tmp_path, sweep_to=str(cold),
        sweep_above_lovelace=100 * ADA, sweep_keep_lovelace=KEEP,
    )  # fmt: skip
    held = balance(devnet, market.address)
    assert held > 100 * ADA
    engine = make_engine(made)
    batcher = settlement.Batcher(engine, Chain.connect(made.ogmios_url, made.deployment),
                                 market, made)  # fmt: skip
    since = await tip_point(devnet.url)

    await asyncio.to_thread(batcher.run)
    fee = await tx_fee(devnet, await swept_to(devnet, cold), since)
    assert balance(devnet, cold) == held - KEEP
    assert balance(devnet, market.address) == KEEP - fee

    await asyncio.to_thread(batcher.run)  # below the threshold now: nothing moves
    assert balance(devnet, cold) == held - KEEP and len(devnet.context().utxos(cold)) == 1
    engine.dispose()


async def test_a_lost_sweep_frees_the_wallet_at_its_ttl_and_is_made_again(
    devnet, settings, tmp_path, monkeypatch
):
    """A sweep the node drops (stood in for here by a submit that sends nothing: the one fake)
    holds the wallet's UTxOs as busy only until its ttl passes at the chain's tip; the next
    round sweeps again, for real, to the lovelace."""
    cold = Wallet.of(PaymentSigningKey.generate(), Network.TESTNET).address
    made, market = await leader_settings(
        served_at_head(settings), devnet, tmp_path, sweep_to=str(cold),
        sweep_above_lovelace=100 * ADA, sweep_keep_lovelace=KEEP,
    )  # fmt: skip
    held = balance(devnet, market.address)
    engine = make_engine(made)
    batcher = settlement.Batcher(engine, Chain.connect(made.ogmios_url, made.deployment),
                                 market, made)  # fmt: skip
    sweeper = batcher.sweeper
    assert sweeper is not None
    monkeypatch.setattr(sweep, "submit_sync", lambda url, tx: str(tx.id))  # dropped
    await asyncio.to_thread(batcher.run)
    assert sweeper.pending and balance(devnet, market.address) == held
    assert sweeper.busy() == sweeper.pending  # its inputs wait while it could still land
    monkeypatch.undo()
    while Clock.now(batcher.chain.context).tip_slot < sweeper.pending_ttl:  # the chain's time
        await request(devnet.url, "devnet/advanceTime", {"slots": 1000})
    since = await tip_point(devnet.url)
    await asyncio.to_thread(batcher.run)  # past its ttl: the wallet is free, swept anew
    fee = await tx_fee(devnet, await swept_to(devnet, cold), since)
    assert balance(devnet, cold) == held - KEEP
    assert balance(devnet, market.address) == KEEP - fee
    engine.dispose()


async def test_a_sweep_is_refused_where_it_could_lose_money(devnet, settings, tmp_path):
    mainnet = Wallet.of(PaymentSigningKey.generate(), Network.MAINNET).address
    made, market = await leader_settings(served_at_head(settings), devnet, tmp_path,
                                         sweep_to=str(mainnet))  # fmt: skip
    engine = make_engine(made)
    chain = Chain.connect(made.ogmios_url, made.deployment)
    with pytest.raises(MarketRefusal, match="not on the deployment's network"):
        settlement.Batcher(engine, chain, market, made)
    typo = made.model_copy(update={"sweep_to": "addr_test1notanaddress"})
    with pytest.raises(MarketRefusal, match="not an address"):
        settlement.Batcher(engine, chain, market, typo)
    engine.dispose()
    with pytest.raises(ValidationError, match="sweep_keep_lovelace must be below"):
        MarketSettings(sweep_to=str(mainnet), sweep_above_lovelace=KEEP, sweep_keep_lovelace=KEEP)
