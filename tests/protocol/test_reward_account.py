"""Issue 18 D: the escrow script's reward account. Anyone can pay into it (on a real chain a
returned deposit may name it; the devnet's `devnet/reward` stands in), and the ledger takes a
withdrawal only of its whole balance. A withdraw run with no escrow in it is refused, so
nobody drains it alone; a settle withdraws exactly the balance, so a non-zero one no longer
breaks settlement."""

from __future__ import annotations

import pytest

from offchain.chain.ogmios import OgmiosError, request
from offchain.devnet.genesis import ADA
from offchain.protocol import escrow as escrows
from offchain.protocol.deployment import Deployment
from offchain.protocol.types import BatchSettle
from tests.protocol.conftest import deployed
from tests.protocol.onchain import (
    ALLOWANCE,
    EVIDENCE,
    NOTICE_MS,
    REFUND_WINDOW_MS,
    RESULT,
    SCRIPT_FAILED,
    SLASH_SHARE_BPS,
    balance,
    confirm,
    handmade,
    lock,
    plain_fee,
    rejected,
    to_settle,
    wallet,
)

UNITS = 1_000


@pytest.fixture(scope="module")
async def own(devnet) -> Deployment:
    """A deployment of its own (another refund window makes another escrow script), so what
    is paid into its reward account touches no other test's."""
    return await deployed(devnet, NOTICE_MS, SLASH_SHARE_BPS, REFUND_WINDOW_MS + 1)


async def pay_in(devnet, deployment: Deployment, lovelace: int) -> int:
    """Pay `lovelace` into the escrow script's reward account; its balance after."""
    params = {"scripts": [deployment.escrow_hash.payload.hex()], "lovelace": lovelace}
    answer = await request(devnet.url, "devnet/reward", params)
    return answer["rewards"]["ada"]["lovelace"]


def held(devnet, deployment: Deployment) -> int | None:
    return devnet.context().script_reward_balance(deployment.escrow_hash)


async def test_an_empty_batch_cannot_withdraw_the_reward_account(devnet, own):
    thief = await wallet(devnet)
    balance_now = await pay_in(devnet, own, 5 * ADA)
    assert held(devnet, own) == balance_now >= 5 * ADA
    draining = handmade(
        devnet, thief, plain_fee(devnet, thief),
        withdraw=(own.escrow_ref, own.reward_address, BatchSettle([])), withdrawn=balance_now,
    )  # fmt: skip
    await rejected(devnet, draining, SCRIPT_FAILED, "empty batch")
    assert held(devnet, own) == balance_now


async def test_a_settle_withdraws_a_non_zero_reward_balance(devnet, own):
    consumer, provider, settler = [await wallet(devnet) for _ in range(3)]
    escrow = await lock(devnet, own, consumer, provider)
    balance_now = await pay_in(devnet, own, 3 * ADA)
    receipt = to_settle(own, provider.key, escrow, UNITS, RESULT, EVIDENCE)
    settle = escrows.settle(devnet.context(), own, [receipt], settler.address)
    assert dict(settle.transaction_body.withdraws) == {bytes(own.reward_address): balance_now}
    before = balance(devnet, settler.address)
    tx = await confirm(devnet, settler.sign(settle))
    assert held(devnet, own) == 0
    gained = balance(devnet, settler.address) - before
    assert gained == ALLOWANCE + balance_now - tx.transaction_body.fee


async def test_the_devnet_pays_only_into_a_registered_reward_account(devnet):
    unregistered = {"scripts": ["ab" * 28], "lovelace": ADA}
    with pytest.raises(OgmiosError, match="not registered"):
        await request(devnet.url, "devnet/reward", unregistered)
    with pytest.raises(OgmiosError, match="one credential"):
        await request(devnet.url, "devnet/reward", {"lovelace": ADA})
