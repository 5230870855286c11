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
from offchain.market.db import make_engine
from offchain.market.errors import MarketRefusal
from offchain.market.services import settlement
from offchain.market.services.chain import Chain
from offchain.market.settings import MarketSettings
from offchain.protocol.tx.txbuild import Wallet
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
