"""The explorer in a real browser: Debian's chromium driven by Playwright (no browser download;
`UNCHAINED_CHROMIUM` points elsewhere), a market on the session's devnet, and a folder for the
screenshots (`UNCHAINED_EXPLORER_ARTIFACTS`, else the repository's gitignored
`artifacts/explorer/`, where a CI run keeps them as artifacts)."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from playwright.async_api import async_playwright
from sqlmodel import Session

from offchain.chain.time import ChainTime, Era
from offchain.market.explorer import routes
from offchain.market.explorer.queries import Scripts
from offchain.market.settings import MarketSettings
from offchain.protocol.tx import deployment_file
from tests.market.conftest import (  # noqa: F401 - shared fixtures
    IDENTITY,
    database_url,
    market_deployment,
    postgresql_cluster,
    postgresql_url,
)
from tests.market.database import Seed, engine_at_head
from tests.protocol.onchain import NOTICE_MS, REFUND_WINDOW_MS

ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts" / "explorer"
CHROMIUM = os.environ.get("UNCHAINED_CHROMIUM", "/usr/bin/chromium")
# Headless, and nothing that reaches out of this machine (its network is closed).
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip


@pytest.fixture
def settings(tmp_path, devnet, market_deployment) -> MarketSettings:  # noqa: F811
    deployment_file.save(market_deployment, tmp_path / "deployment.json")
    return MarketSettings(
        data_dir=tmp_path / "market", ogmios_url=devnet.url,
        deployment=tmp_path / "deployment.json", identity=IDENTITY,
    )  # fmt: skip


START_MS = 1_700_000_000_000  # the seeded chain's system start: slot n is START_MS + n s


@contextmanager
def explorer_over(
    tmp_path: Path, url: str, seed: Seed, *, seed_once: bool = False
) -> Iterator[TestClient]:
    """The explorer alone (no chain) over a fresh database at Alembic's head, seeded by
    `seed`, with a one-second-slot chain clock from START_MS (`url`: "" for SQLite).
    `seed_once`: the seed reads no clock, so on SQLite it runs once per process."""
    settings = MarketSettings(data_dir=tmp_path / "market", database_url=url)
    engine = engine_at_head(settings, seed if seed_once else None)
    if not seed_once:
        with Session(engine) as session:
            seed(session)
    state = routes.ExplorerState(
        Scripts(0, bytes(28), NOTICE_MS, REFUND_WINDOW_MS),
        ChainTime(START_MS, (Era(0, 0, None, 1000),)),
    )
    try:
        with TestClient(routes.explorer_app(settings, engine, state)) as client:
            yield client
    finally:
        engine.dispose()


@pytest.fixture(scope="session")
async def browser() -> AsyncIterator:
    if shutil.which(CHROMIUM) is None:
        pytest.fail(f"no chromium at {CHROMIUM}: run scripts/setup.sh")
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        await browser.close()


@pytest.fixture(scope="session")
def artifacts() -> Path:
    chosen = os.environ.get("UNCHAINED_EXPLORER_ARTIFACTS")
    folder = Path(chosen) if chosen else ARTIFACTS
    folder.mkdir(parents=True, exist_ok=True)
    return folder
