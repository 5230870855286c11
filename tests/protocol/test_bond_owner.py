"""A bond owned by a cold key (PROTOCOL.md, bond): its datum's `provider` is the provider's
payout address, whose key alone begins unbonding and withdraws, while the provider key (hot:
it lives on the daemon's machine) still tops up and signs the acceptances a slash needs. Each
attack is a transaction the script refuses on the devnet, beside its honest twin; balances to
the lovelace."""

from __future__ import annotations

import dataclasses

import pytest
from pycardano import Address, Network, ScriptHash, TransactionBuilder, TransactionOutput

from offchain.protocol.ledger.addresses import to_plutus
from offchain.protocol.ledger.split import refund_amount, slash_share
from offchain.protocol.ledger.types import BeginUnbond, Just, TopUp, Withdraw
from offchain.protocol.tx import bond as bonds
from offchain.protocol.tx.escrow import escrow_datum
from offchain.protocol.tx.txbuild import BuildError, Clock, Wallet
from tests.protocol import onchain
from tests.protocol.onchain import (
    ADA,
    ALLOWANCE,
    BOND,
    LOCKED,
    NOTICE_MS,
    SCRIPT_FAILED,
    SLASH_SHARE_BPS,
    balance,
    bond_by_hand,
    confirm,
    continuing,
    output,
    rejected,
    travel_to,
    wallet,
)

TOP_UP = 10 * ADA


async def cold_bond(devnet, deployment, hot: Wallet, cold: Wallet):
    """A bond owned by `cold`, backing `hot`'s acceptances, paid and signed by `hot`: the hot
    wallet gives exactly the bond and the fee."""
    before = balance(devnet, hot.address)
    made = bonds.create(devnet.context(), deployment, cold.address, hot.vkey, BOND, hot.address)
    tx = await confirm(devnet, hot.sign(made))
    assert balance(devnet, hot.address) == before - BOND - tx.transaction_body.fee
    bond = output(tx, bonds.BOND_OUTPUT)
    assert bond.output.address == deployment.bond_address(cold.address)
    datum = bonds.bond_datum(deployment, bond)
    assert (datum.provider, datum.provider_vkey) == (to_plutus(cold.address), hot.vkey)
    return bond


def unbond_by(devnet, deployment, bond, signer: Wallet):
    """Begin unbonding `bond` exactly as the owner would, but signed (and paid) by `signer`."""
    clock = Clock.now(devnet.context())
    ttl = clock.ttl_until(clock.tip_ms + 60_000)
    since = clock.time.slot_to_posix_ms(ttl)
    datum = dataclasses.replace(bonds.bond_datum(deployment, bond), unbonding_since=Just(since))
    made = [TransactionOutput(bond.output.address, bond.output.amount.coin, datum=datum)]
    return bond_by_hand(
        devnet, deployment, signer, bond, BeginUnbond(0), made, ttl=ttl, signers=[signer.key]
    )


def withdraw_by(devnet, deployment, bond, signer: Wallet):
    """Withdraw `bond` to `signer`, signed by it."""
    start = Clock.now(devnet.context()).tip_slot
    return bond_by_hand(
        devnet, deployment, signer, bond, Withdraw(), start=start, signers=[signer.key]
    )


async def test_only_the_cold_owner_unbonds_and_withdraws_while_the_hot_key_tops_up(
    devnet, deployment
):
    hot, cold, stranger = [await wallet(devnet) for _ in range(3)]
    bond = await cold_bond(devnet, deployment, hot, cold)

    # the hot key tops up (the daemon may: a top-up only adds); a stranger may not
    racing = bond_by_hand(devnet, deployment, stranger, bond, TopUp(0),
                          [continuing(bond, BOND + TOP_UP)], signers=[stranger.key])  # fmt: skip
    await rejected(devnet, racing, SCRIPT_FAILED, "traces: provider must sign")
    before = balance(devnet, hot.address)
    topped = bonds.top_up(devnet.context(), deployment, bond, hot.address, TOP_UP)
    assert topped.transaction_body.required_signers == [hot.key_hash]
    tx = await confirm(devnet, hot.sign(topped))
    assert balance(devnet, hot.address) == before - TOP_UP - tx.transaction_body.fee
    bond = output(tx, bonds.BOND_OUTPUT)
    assert bond.output.amount.coin == BOND + TOP_UP

    # a stolen hot key cannot give notice, nor can a stranger; the builder says so first
    with pytest.raises(BuildError, match="not an address of the bond's owner's key"):
        bonds.begin_unbond(devnet.context(), deployment, bond, hot.address)
    for thief in (hot, stranger):
        attack = unbond_by(devnet, deployment, bond, thief)
        await rejected(devnet, attack, SCRIPT_FAILED, "traces: owner must sign")
    before = balance(devnet, cold.address)
    unbond = cold.sign(bonds.begin_unbond(devnet.context(), deployment, bond, cold.address))
    assert unbond.transaction_body.required_signers == [cold.key_hash]
    bond = output(await confirm(devnet, unbond), bonds.BOND_OUTPUT)
    assert balance(devnet, cold.address) == before - unbond.transaction_body.fee
    assert bond.output.amount.coin == BOND + TOP_UP
    since = bonds.bond_datum(deployment, bond).unbonding_since
    assert isinstance(since, Just)

    # past the notice: the hot key cannot take the bond (to itself), nor a stranger
    await travel_to(devnet, since.value + NOTICE_MS)
    with pytest.raises(BuildError, match="not an address of the bond's owner's key"):
        bonds.withdraw(devnet.context(), deployment, bond, hot.address)
    for thief in (hot, stranger):
        attack = withdraw_by(devnet, deployment, bond, thief)
        await rejected(devnet, attack, SCRIPT_FAILED, "traces: owner must sign")
    before = balance(devnet, cold.address), balance(devnet, hot.address)
    withdrawn = cold.sign(bonds.withdraw(devnet.context(), deployment, bond, cold.address))
    await confirm(devnet, withdrawn)
    fee = withdrawn.transaction_body.fee
    assert balance(devnet, cold.address) - before[0] == BOND + TOP_UP - fee
    assert balance(devnet, hot.address) == before[1]
    assert bonds.bonds_of(devnet.context(), deployment, cold.address, hot.vkey) == []


async def test_a_cold_owned_bond_is_slashed_on_the_hot_keys_acceptance(devnet, deployment):
    """Slash is unchanged: the hot key signed the acceptance, the consumer takes its share."""
    consumer, hot, cold = [await wallet(devnet) for _ in range(3)]
    bond = await cold_bond(devnet, deployment, hot, cold)
    escrow = await onchain.lock(devnet, deployment, consumer, hot, paid_at=cold.address)
    acceptance = onchain.accept(deployment, hot.key, escrow)
    await travel_to(devnet, escrow_datum(deployment, escrow).close + 1)  # the consumer's window
    before = balance(devnet, consumer.address), balance(devnet, cold.address)
    slashed = bonds.slash(devnet.context(), deployment, escrow, bond, acceptance, consumer.address)
    tx = await confirm(devnet, consumer.sign(slashed))

    share = slash_share(BOND, SLASH_SHARE_BPS)
    owed = refund_amount(LOCKED, ALLOWANCE) + share + ALLOWANCE - tx.transaction_body.fee
    assert balance(devnet, consumer.address) - before[0] == owed
    assert balance(devnet, cold.address) == before[1]
    [left] = bonds.bonds_of(devnet.context(), deployment, cold.address, hot.vkey)
    assert left[0].output.amount.coin == BOND - share


async def test_a_bond_owned_by_a_script_address_can_never_be_unbonded(devnet, deployment):
    """No key can sign for a script credential: the builder refuses such an owner, and a
    bond posted by hand naming one is refused at its unbonding, whoever signs."""
    hot = await wallet(devnet)
    script = Address(ScriptHash(bytes(28)), network=Network.TESTNET)
    with pytest.raises(BuildError, match="a bond's owner must be a key"):
        bonds.create(devnet.context(), deployment, script, hot.vkey, BOND, hot.address)
    bond = await onchain.post_bond(devnet, deployment, hot, BOND)  # its datum, but the owner
    datum = dataclasses.replace(bonds.bond_datum(deployment, bond), provider=to_plutus(script))
    builder = TransactionBuilder(devnet.context())
    builder.add_input_address(hot.address)
    builder.add_output(TransactionOutput(bond.output.address, BOND, datum=datum))
    posted = await confirm(devnet, builder.build_and_sign([hot.key], change_address=hot.address))
    attack = unbond_by(devnet, deployment, output(posted, 0), hot)
    await rejected(devnet, attack, SCRIPT_FAILED, "traces: owner must be a key")
