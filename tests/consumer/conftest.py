"""The consumer against the real thing: the session's devnet, the market served by uvicorn in
this process (SQLite, one confirmation, a funded market wallet that settles), and a scripted
provider holding its own key (test code playing the provider daemon's part over HTTP)."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from consumer.sdk.client import MarketClient
from consumer.sdk.keys import ConsumerKey
from consumer.sdk.session import Consumer
from consumer.sdk.store import JobStore
from devnet.process import DevnetProcess
from offchain.market.settings import MarketSettings
from offchain.protocol.tx import deployment_file
from offchain.protocol.tx.deployment import Deployment
from tests.chains import confirmations
from tests.consumer.scripted import ScriptedProvider
from tests.market.client import serve
from tests.market.database import served_at_head
from tests.protocol.conftest import NOTICE_MS, SLASH_SHARE_BPS, deployed
from tests.protocol.onchain import wallet

IDENTITY = "unchained-market:consumer-test"
SETTLE_WINDOW_MS = 10 * 60_000  # room for the acceptance check's margins (start, settle)


@pytest.fixture(scope="session")
async def consumer_deployment(devnet) -> Deployment:
    return await deployed(devnet, NOTICE_MS, SLASH_SHARE_BPS)


@dataclasses.dataclass
class Market:
    settings: MarketSettings
    url: str
    deployment_path: Path


@pytest.fixture
async def market(tmp_path, devnet, consumer_deployment) -> AsyncIterator[Market]:
    path = tmp_path / "deployment.json"
    deployment_file.save(consumer_deployment, path)
    settler = await wallet(devnet)
    settler.key.save(str(tmp_path / "market.skey"))
    # a quote lives 2 minutes: a test's few CLI calls between quote and lock take seconds each
    # on a busy machine
    settings = MarketSettings(
        data_dir=tmp_path / "market", ogmios_url=devnet.url, deployment=path, identity=IDENTITY,
        confirmations=confirmations(devnet), wallet_key=tmp_path / "market.skey",
        settle_every_ms=300,
        schedule_every_ms=300, leader_poll_ms=200, quote_ttl_ms=120_000,
        settle_window_ms=SETTLE_WINDOW_MS, result_limit_bytes=256 << 20,
    )  # fmt: skip
    with serve(served_at_head(settings)) as url:
        yield Market(settings, url, path)


@pytest.fixture
async def provider(market, devnet, consumer_deployment) -> AsyncIterator[ScriptedProvider]:
    scripted = await ScriptedProvider.start(devnet, consumer_deployment, market.url, IDENTITY)
    yield scripted
    await scripted.http.aclose()


async def new_consumer(
    devnet: DevnetProcess, deployment: Deployment, market: Market, state_dir: Path,
    lovelace: int,
) -> Consumer:  # fmt: skip
    """A consumer with a fresh key holding exactly `lovelace` (so balances are exact)."""
    funded = await wallet(devnet, lovelace)
    key = ConsumerKey(funded.key)
    return Consumer(
        key, MarketClient.open(market.url, IDENTITY, key), devnet.context(), devnet.url,
        deployment, JobStore(state_dir),
    )  # fmt: skip


@pytest.fixture
async def consumer(devnet, consumer_deployment, market, tmp_path) -> AsyncIterator[Consumer]:
    made = await new_consumer(
        devnet, consumer_deployment, market, tmp_path / "consumer", 500_000_000
    )
    yield made
    await made.market.aclose()
