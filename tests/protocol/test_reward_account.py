"""Issue 18 D, with issue 21's settle script: the settle script's reward account. Anyone can pay
into it (on a real chain a returned deposit may name it; the devnet's `devnet/reward` stands
in), and the ledger takes a withdrawal only of its whole balance. A withdrawal with no escrow
in it is refused, so nobody drains it alone; a settle withdraws exactly the balance, so a
non-zero one does not break settlement.

Every deployment of one network shares the settle script, and so its reward account: the
test pays in and settles in one go, leaving it at 0 for every other test's hand-made settle
(which withdraws 0)."""

from __future__ import annotations

import pytest
from pycardano import ScriptHash

from devnet.genesis import ADA
from offchain.chain.ogmios import OgmiosError, request
from offchain.protocol.ledger.types import BatchSettle
from offchain.protocol.tx import batch
from offchain.protocol.tx import channel as channels
from offchain.protocol.tx.deployment import Deployment
from tests.protocol.channels import iou, open_on
from tests.protocol.onchain import (
    ALLOWANCE,
    EVIDENCE,
    RESULT,
    SCRIPT_FAILED,
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


async def pay_in(
    devnet, deployment: Deployment, lovelace: int, script: ScriptHash | None = None
) -> int:
    """Pay `lovelace` into the settle script's reward account (or `script`'s); its balance
    after."""
    script = script or deployment.settle_hash
    params = {"scripts": [script.payload.hex()], "lovelace": lovelace}
    answer = await request(devnet.url, "devnet/reward", params)
    return answer["rewards"]["ada"]["lovelace"]


def held(devnet, deployment: Deployment) -> int | None:
    return devnet.context().script_reward_balance(deployment.settle_hash)


async def test_nobody_drains_the_reward_account_and_a_settle_withdraws_it_all(
    devnet, either_settle
):
    deployment = either_settle
    consumer, provider, settler, thief = [await wallet(devnet) for _ in range(4)]
    escrow = await lock(devnet, deployment, consumer, provider)
    balance_now = await pay_in(devnet, deployment, 3 * ADA)
    assert held(devnet, deployment) == balance_now >= 3 * ADA

    draining = handmade(
        devnet, thief, plain_fee(devnet, thief), withdrawn=balance_now,
        withdraw=(deployment.settle_ref, deployment.reward_address, BatchSettle([], [], [], 0)),
    )  # fmt: skip
    # no escrow input, no item: both scripts find the items empty first
    await rejected(devnet, draining, SCRIPT_FAILED, "traces: empty batch")
    assert held(devnet, deployment) == balance_now

    receipt = to_settle(deployment, provider.key, escrow, UNITS, RESULT, EVIDENCE)
    settle = batch.settle(devnet.context(), deployment, [receipt], settler.address)
    assert dict(settle.transaction_body.withdraws) == {
        bytes(deployment.reward_address): balance_now
    }
    before = balance(devnet, settler.address)
    tx = await confirm(devnet, settler.sign(settle))
    assert held(devnet, deployment) == 0
    gained = balance(devnet, settler.address) - before
    assert gained == ALLOWANCE + balance_now - tx.transaction_body.fee


async def test_anyone_takes_a_withdraw_zero_accounts_balance_with_a_batch_of_its_own(
    devnet, deployment
):
    """Intended (PROTOCOL.md): the settle and claim scripts' reward accounts hold no protocol
    funds; whatever someone paid in goes to whoever submits the next batch, here a wallet
    that settles an escrow it locked for itself and claims a channel it opened to itself.
    Only the accounts' donors lose, and a script insisting on 0 would let one lovelace paid
    in stop every batch."""
    anyone = await wallet(devnet, 200 * ADA)
    escrow = await lock(devnet, deployment, anyone, anyone)
    paid_in = await pay_in(devnet, deployment, 2 * ADA)
    receipt = to_settle(deployment, anyone.key, escrow, UNITS, RESULT, EVIDENCE)
    settle = batch.settle(devnet.context(), deployment, [receipt], anyone.address)
    before = balance(devnet, anyone.address)
    tx = await confirm(devnet, anyone.sign(settle))
    assert held(devnet, deployment) == 0
    own_escrow = escrow.output.amount.coin  # back to itself, as provider and consumer
    assert (
        balance(devnet, anyone.address) - before == own_escrow + paid_in - tx.transaction_body.fee
    )

    channel, _, _ = await open_on(devnet, deployment, anyone, anyone)
    paid_in = await pay_in(devnet, deployment, 3 * ADA, deployment.claim_hash)
    signed = iou(deployment, anyone, channel, ADA)
    claim = channels.claim_channels(
        devnet.context(), deployment, [(channel, signed)], anyone.address
    )
    assert dict(claim.transaction_body.withdraws) == {
        bytes(deployment.claim_reward_address): paid_in
    }
    before = balance(devnet, anyone.address)
    tx = await confirm(devnet, anyone.sign(claim))
    assert devnet.context().script_reward_balance(deployment.claim_hash) == 0
    assert balance(devnet, anyone.address) - before == ADA + paid_in - tx.transaction_body.fee


async def test_the_devnet_pays_only_into_a_registered_reward_account(devnet):
    unregistered = {"scripts": ["ab" * 28], "lovelace": ADA}
    with pytest.raises(OgmiosError, match="not registered"):
        await request(devnet.url, "devnet/reward", unregistered)
    with pytest.raises(OgmiosError, match="one credential"):
        await request(devnet.url, "devnet/reward", {"lovelace": ADA})
