"""The market served over real HTTP against the session's devnet, on each database."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from offchain.market.settings import MarketSettings
from offchain.protocol.tx import deployment_file
from offchain.protocol.tx.deployment import Deployment
from tests.market.client import serve
from tests.market.database import served_at_head
from tests.market.postgres import Cluster, server_bin
from tests.protocol.conftest import NOTICE_MS, SLASH_SHARE_BPS, deployed

IDENTITY = "unchained-market:test"


@pytest.fixture(scope="session")
async def market_deployment(devnet) -> Deployment:
    return await deployed(devnet, NOTICE_MS, SLASH_SHARE_BPS)


@pytest.fixture(scope="session")
def postgresql_cluster() -> Iterator[Cluster]:
    """One throwaway PostgreSQL server for the session (scripts/setup.sh installs it)."""
    bin_dir = server_bin()
    if bin_dir is None:
        pytest.fail("PostgreSQL is not installed: run scripts/setup.sh")
    cluster = Cluster(bin_dir).start()
    yield cluster
    cluster.stop()


@pytest.fixture
def postgresql_url(postgresql_cluster) -> str:
    """A fresh, empty database on the session's throwaway PostgreSQL."""
    return postgresql_cluster.new_database()


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request) -> str:
    """Empty for the default SQLite file; a throwaway PostgreSQL's URL otherwise."""
    if request.param == "sqlite":
        return ""
    return request.getfixturevalue("postgresql_url")


@pytest.fixture
def settings(tmp_path, devnet, market_deployment, database_url) -> MarketSettings:
    deployment_file.save(market_deployment, tmp_path / "deployment.json")
    return MarketSettings(
        data_dir=tmp_path / "market", database_url=database_url, ogmios_url=devnet.url,
        deployment=tmp_path / "deployment.json", identity=IDENTITY,
        body_limit_bytes=64 * 1024, result_limit_bytes=1 << 20,
    )  # fmt: skip


@pytest.fixture
async def http(settings) -> AsyncIterator[httpx.AsyncClient]:
    with serve(served_at_head(settings)) as url:
        async with httpx.AsyncClient(base_url=url, timeout=60) as client:
            yield client
