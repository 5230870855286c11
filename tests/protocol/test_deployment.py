"""A deployment: the escrow, bond, settle, channel and claim scripts as reference UTxOs nobody
can spend, and the settle and claim scripts' stake credentials registered once (deploying the
same scripts again skips the registrations)."""

from __future__ import annotations

from pycardano import script_hash

from contracts.artifacts import (
    bond_script,
    channel_script,
    claim_script,
    escrow_script,
    settle_script,
)
from offchain.chain.ogmios import request
from offchain.protocol.tx.deployment import NEVER_SPENDABLE, deploy
from tests.protocol.conftest import NOTICE_MS, REFUND_WINDOW_MS, SLASH_SHARE_BPS
from tests.protocol.onchain import confirm, wallet


async def test_scripts_are_published_where_nobody_can_spend_them(devnet, deployment):
    assert deployment.settle_script == settle_script(0)
    assert deployment.escrow_script == escrow_script(
        deployment.settle_hash.payload, REFUND_WINDOW_MS
    )
    assert deployment.bond_script == bond_script(
        0, deployment.escrow_hash.payload, NOTICE_MS, SLASH_SHARE_BPS
    )
    assert deployment.claim_script == claim_script(0)
    assert deployment.channel_script == channel_script(deployment.claim_hash.payload)
    assert deployment.reward_address.staking_part == deployment.settle_hash
    assert deployment.claim_reward_address.staking_part == deployment.claim_hash
    renter = await wallet(devnet)
    channel = deployment.channel_address(renter.address)
    assert channel.payment_part == deployment.channel_hash
    assert channel.staking_part == renter.address.staking_part
    refs = (
        deployment.escrow_ref, deployment.bond_ref, deployment.settle_ref,
        deployment.channel_ref, deployment.claim_ref,
    )  # fmt: skip
    for ref in refs:
        assert ref.output.address.payment_part == script_hash(NEVER_SPENDABLE)
        on_chain = devnet.context().utxo_by_tx_id(str(ref.input.transaction_id), ref.input.index)
        assert on_chain is not None and on_chain.output.script == ref.output.script
    summaries = await request(
        devnet.url,
        "queryLedgerState/rewardAccountSummaries",
        {"scripts": [h.payload.hex() for h in (deployment.settle_hash, deployment.claim_hash)]},
    )
    assert [s["rewards"] for s in summaries] == [{"ada": {"lovelace": 0}}] * 2


async def test_deploying_the_same_scripts_again_registers_nothing(devnet, deployment):
    deployer = await wallet(devnet)
    (tx,), again = deploy(
        devnet.context(), deployer.address, 0, NOTICE_MS, SLASH_SHARE_BPS, REFUND_WINDOW_MS
    )
    assert not tx.transaction_body.certificates
    assert again.settle_hash == deployment.settle_hash
    assert again.escrow_hash == deployment.escrow_hash
    assert again.channel_hash == deployment.channel_hash
    await confirm(devnet, deployer.sign(tx))
