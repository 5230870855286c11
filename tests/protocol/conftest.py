"""One protocol deployment on the session's devnet, shared by every protocol test (and one
with the settle script's OpShin reference, for the tests that run both)."""

from __future__ import annotations

import pytest

from offchain.protocol.tx.deployment import Deployment, deploy
from tests.protocol.onchain import (
    NOTICE_MS,
    REFUND_WINDOW_MS,
    SLASH_SHARE_BPS,
    confirm,
    wallet,
)

V2_NOTICE_MS = 60_000  # a second bond version: same escrow script, other terms
V2_SLASH_SHARE_BPS = 5_000


async def deployed(
    devnet,
    notice_ms: int,
    slash_share_bps: int,
    refund_window_ms: int = REFUND_WINDOW_MS,
    reference: bool = False,
) -> Deployment:
    deployer = await wallet(devnet)
    txs, made = deploy(
        devnet.context(), deployer.address, 0, notice_ms, slash_share_bps, refund_window_ms,
        reference,
    )  # fmt: skip
    for tx in txs:  # the OpShin references take two
        await confirm(devnet, deployer.sign(tx))
    return made


@pytest.fixture(scope="session")
async def deployment(devnet) -> Deployment:
    return await deployed(devnet, NOTICE_MS, SLASH_SHARE_BPS)


@pytest.fixture(scope="session")
async def reference_deployment(devnet) -> Deployment:
    """The session's terms with the settle script's OpShin reference (its own settle, escrow
    and bond scripts)."""
    return await deployed(devnet, NOTICE_MS, SLASH_SHARE_BPS, reference=True)


@pytest.fixture(params=[False, True], ids=["deployed", "reference"])
def either_settle(request: pytest.FixtureRequest) -> Deployment:
    """The test runs against each settle script: the hand-written one and its reference."""
    return request.getfixturevalue("reference_deployment" if request.param else "deployment")


@pytest.fixture(scope="session")
async def deployment_v2(devnet, deployment) -> Deployment:
    """Another bond version beside `deployment`'s, sharing its escrow script."""
    made = await deployed(devnet, V2_NOTICE_MS, V2_SLASH_SHARE_BPS)
    assert made.escrow_hash == deployment.escrow_hash
    assert made.bond_hash != deployment.bond_hash
    return made
