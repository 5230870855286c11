"""Issue 18 C: nobody but the provider can spend its bond to race a consumer's slash. A
stranger's one-lovelace top-up is refused by the chain; the provider's own churn (a top-up)
leaves the slash builder to find the bond's current UTxO, and the slash still goes through."""

from __future__ import annotations

from offchain.protocol.ledger.split import slash_share
from offchain.protocol.ledger.types import TopUp
from offchain.protocol.tx import bond as bonds
from offchain.protocol.tx import escrow as escrows
from tests.protocol.onchain import (
    ADA,
    BOND,
    LOCKED,
    SCRIPT_FAILED,
    SLASH_SHARE_BPS,
    Spend,
    accept,
    balance,
    confirm,
    continuing,
    handmade,
    lock,
    output,
    plain_fee,
    post_bond,
    rejected,
    travel_to,
    wallet,
)


async def test_a_strangers_top_up_is_refused_and_the_providers_accepted(devnet, deployment):
    provider, stranger = [await wallet(devnet) for _ in range(2)]
    bond = await post_bond(devnet, deployment, provider)
    racing = handmade(
        devnet, stranger, plain_fee(devnet, stranger),
        spends=[Spend(bond, deployment.bond_ref, TopUp(0))],
        outputs=[continuing(bond, BOND + 1)],
    )  # fmt: skip
    await rejected(devnet, racing, SCRIPT_FAILED, "provider must sign")
    topped = bonds.top_up(devnet.context(), deployment, bond, provider.address, 1)
    assert topped.transaction_body.required_signers == [provider.key_hash]
    tx = await confirm(devnet, provider.sign(topped))
    assert output(tx, bonds.BOND_OUTPUT).output.amount.coin == BOND + 1


async def test_a_slash_built_on_a_bond_the_provider_churned_takes_its_current_utxo(
    devnet, deployment
):
    consumer, provider = [await wallet(devnet) for _ in range(2)]
    seen = await post_bond(devnet, deployment, provider)  # the bond as the consumer read it
    escrow = await lock(devnet, deployment, consumer, provider)
    acceptance = accept(deployment, provider.key, escrow)
    await travel_to(devnet, escrows.escrow_datum(deployment, escrow).close + 1)
    churn = bonds.top_up(devnet.context(), deployment, seen, provider.address, 10 * ADA)
    current = output(await confirm(devnet, provider.sign(churn)), bonds.BOND_OUTPUT)

    before = balance(devnet, consumer.address)
    slash = bonds.slash(devnet.context(), deployment, escrow, seen, acceptance, consumer.address)
    assert current.input in slash.transaction_body.inputs
    tx = await confirm(devnet, consumer.sign(slash))
    share = slash_share(BOND + 10 * ADA, SLASH_SHARE_BPS)
    assert balance(devnet, consumer.address) - before == LOCKED + share - tx.transaction_body.fee
