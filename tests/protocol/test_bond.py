"""Bond honest paths on the devnet (create, top up, unbond, withdraw, slash with a refund),
balances checked to the lovelace, and the builders' refusals."""

from __future__ import annotations

import pytest

from offchain.protocol.ledger.split import refund_amount, slash_share
from offchain.protocol.ledger.types import Just
from offchain.protocol.tx import bond as bonds
from offchain.protocol.tx.escrow import escrow_datum
from offchain.protocol.tx.txbuild import BuildError, Clock
from tests.protocol import onchain
from tests.protocol.conftest import NOTICE_MS, SLASH_SHARE_BPS
from tests.protocol.onchain import (
    ADA,
    ALLOWANCE,
    LOCKED,
    REFUND_WINDOW_MS,
    balance,
    confirm,
    output,
    post_bond,
    travel_to,
    wallet,
)

BOND = 400 * ADA


def accept(deployment, provider, escrow) -> bytes:
    """The provider's signed Acceptance of `escrow` (what it sends when it takes the job)."""
    return onchain.accept(deployment, provider.key, escrow)


async def test_a_bond_lives_from_create_to_withdraw(devnet, deployment):
    provider = await wallet(devnet)
    start = balance(devnet, provider.address)
    created = await confirm(
        devnet,
        provider.sign(
            bonds.create(devnet.context(), deployment, provider.address, provider.vkey, BOND)
        ),
    )
    bond = output(created, bonds.BOND_OUTPUT)
    assert bond.output.address == deployment.bond_address(provider.address)

    topped = await confirm(
        devnet,
        provider.sign(bonds.top_up(devnet.context(), deployment, bond, provider.address, 50 * ADA)),
    )
    bond = output(topped, bonds.BOND_OUTPUT)
    assert bond.output.amount.coin == BOND + 50 * ADA

    with pytest.raises(BuildError, match="not unbonding: begin unbonding first"):
        bonds.withdraw(devnet.context(), deployment, bond, provider.address)
    unbond = provider.sign(bonds.begin_unbond(devnet.context(), deployment, bond, provider.address))
    clock = Clock.now(devnet.context())
    since = clock.time.slot_to_posix_ms(unbond.transaction_body.ttl)  # the upper bound
    bond = output(await confirm(devnet, unbond), bonds.BOND_OUTPUT)
    assert bonds.bond_datum(deployment, bond).unbonding_since == Just(since)
    assert bond.output.amount.coin == BOND + 50 * ADA

    with pytest.raises(BuildError, match="the unbonding notice runs until"):
        bonds.withdraw(devnet.context(), deployment, bond, provider.address)
    with pytest.raises(BuildError, match="unbonding since"):
        bonds.begin_unbond(devnet.context(), deployment, bond, provider.address)
    await travel_to(devnet, since + NOTICE_MS)
    withdraw = bonds.withdraw(devnet.context(), deployment, bond, provider.address)
    withdrawn = await confirm(devnet, provider.sign(withdraw))

    fees = sum(t.transaction_body.fee for t in (created, topped, unbond, withdrawn))
    assert balance(devnet, provider.address) == start - fees


async def test_slash_refunds_the_escrow_and_pays_the_consumer_a_share_of_the_bond(
    devnet, deployment
):
    consumer, provider, anyone = [await wallet(devnet) for _ in range(3)]
    bond = await post_bond(devnet, deployment, provider, BOND)
    escrow = await onchain.lock(devnet, deployment, consumer, provider)
    acceptance = accept(deployment, provider, escrow)
    with pytest.raises(BuildError, match="refundable at"):
        bonds.slash(devnet.context(), deployment, escrow, bond, acceptance, anyone.address)

    # after the refund window anyone may (test_refund_window.py: the consumer, within it)
    await travel_to(devnet, escrow_datum(deployment, escrow).close + REFUND_WINDOW_MS + 1)
    before = [balance(devnet, w.address) for w in (consumer, anyone)]
    tx = await confirm(
        devnet,
        anyone.sign(
            bonds.slash(devnet.context(), deployment, escrow, bond, acceptance, anyone.address)
        ),
    )

    share = slash_share(BOND, SLASH_SHARE_BPS)
    after = [balance(devnet, w.address) for w in (consumer, anyone)]
    assert after[0] - before[0] == refund_amount(LOCKED, ALLOWANCE) + share
    assert after[1] - before[1] == ALLOWANCE - tx.transaction_body.fee
    [left] = [
        u for u in devnet.context().utxos(bond.output.address) if u.input.transaction_id == tx.id
    ]
    assert left.output.amount.coin == BOND - share
    assert bonds.bond_datum(deployment, left) == bonds.bond_datum(deployment, bond)


async def test_slash_needs_the_bonds_own_providers_acceptance(devnet, deployment):
    consumer, provider, other = [await wallet(devnet) for _ in range(3)]
    bond = await post_bond(devnet, deployment, provider, BOND)
    escrow = await onchain.lock(devnet, deployment, consumer, provider)
    elsewhere = await onchain.lock(devnet, deployment, consumer, provider)
    await travel_to(devnet, escrow_datum(deployment, escrow).close + 1)
    context = devnet.context()
    with pytest.raises(BuildError, match="no acceptance of"):
        replayed = accept(deployment, provider, elsewhere)
        bonds.slash(context, deployment, escrow, bond, replayed, consumer.address)
    other_bond = await post_bond(devnet, deployment, other, BOND)
    with pytest.raises(BuildError, match="the escrow's provider is not the bond's provider"):
        bonds.slash(
            devnet.context(),
            deployment,
            escrow,
            other_bond,
            accept(deployment, provider, escrow),
            consumer.address,
        )
