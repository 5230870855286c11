"""One protocol deployment on the session's devnet, shared by every protocol test."""

from __future__ import annotations

import pytest

from offchain.protocol.deployment import Deployment, deploy
from tests.protocol.onchain import confirm, wallet

NOTICE_MS = 30_000
SLASH_SHARE_BPS = 2_500


@pytest.fixture(scope="session")
async def deployment(devnet) -> Deployment:
    deployer = await wallet(devnet)
    tx, made = deploy(devnet.context(), deployer, 0, NOTICE_MS, SLASH_SHARE_BPS)
    await confirm(devnet, tx)
    return made
