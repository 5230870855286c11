"""The market's settlement again, on a realistic chain in the normal suite (Praos blocks and
forks, `tests.chains`): escrows found and funded once they are deeper than a fork reaches,
settled in one batch, every party paid to the lovelace and no escrow settled twice."""

from __future__ import annotations

import pytest

from offchain.protocol.tx.deployment import Deployment
from tests.chains import realistic_devnet  # noqa: F401 - this module's devnet
from tests.market.test_settlement import (  # noqa: F401 - collected here again, on this chain
    leader,
    test_follower_funds_and_the_batcher_settles_to_the_lovelace,
)
from tests.protocol.conftest import NOTICE_MS, SLASH_SHARE_BPS, deployed


@pytest.fixture(scope="module")
async def market_deployment(devnet) -> Deployment:
    """The validators deployed on this module's chain (the session's are on another)."""
    return await deployed(devnet, NOTICE_MS, SLASH_SHARE_BPS)


@pytest.fixture
def database_url() -> str:
    """SQLite alone: the flow is the chain's here, not the database's."""
    return ""
