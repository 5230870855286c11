"""A bond that holds native tokens (anyone may send some to a bond address) still lives through
every builder: the validator wants exactly the bond's tokens to go on, so top-up, begin-unbond
and slash carry them over, and withdraw hands them back to the provider."""

from __future__ import annotations

from pycardano import MultiAsset, UTxO

from offchain.protocol.ledger.split import refund_amount, slash_share
from offchain.protocol.ledger.types import Just
from offchain.protocol.tx import bond as bonds
from offchain.protocol.tx.escrow import escrow_datum
from tests.protocol import onchain
from tests.protocol.conftest import NOTICE_MS, SLASH_SHARE_BPS
from tests.protocol.onchain import (
    ADA,
    ALLOWANCE,
    BOND,
    LOCKED,
    REFUND_WINDOW_MS,
    balance,
    bond_with_tokens,
    confirm,
    output,
    travel_to,
    wallet,
)

TOKENS = 60  # junk tokens in the bond: a heavier continuing output, still within the limits
TOP_UP = 50 * ADA


def tokens_at(devnet, utxo: UTxO) -> MultiAsset:
    return sum((u.output.amount.multi_asset for u in devnet.context().utxos(utxo.output.address)
                if u.input == utxo.input), MultiAsset())  # fmt: skip


async def test_a_bond_holding_tokens_is_topped_up_slashed_unbonded_and_withdrawn(
    devnet, deployment
):
    provider, consumer = [await wallet(devnet) for _ in range(2)]
    bond = await bond_with_tokens(devnet, deployment, provider, TOKENS)
    held = bond.output.amount.multi_asset
    assert len(next(iter(held.values()))) == TOKENS

    topped = await confirm(
        devnet,
        provider.sign(bonds.top_up(devnet.context(), deployment, bond, provider.address, TOP_UP)),
    )
    bond = output(topped, bonds.BOND_OUTPUT)
    assert (bond.output.amount.coin, tokens_at(devnet, bond)) == (BOND + TOP_UP, held)

    escrow = await onchain.lock(devnet, deployment, consumer, provider)
    acceptance = onchain.accept(deployment, provider.key, escrow)
    await travel_to(devnet, escrow_datum(deployment, escrow).close + REFUND_WINDOW_MS + 1)
    before = balance(devnet, consumer.address)
    slashed = await confirm(
        devnet,
        consumer.sign(
            bonds.slash(devnet.context(), deployment, escrow, bond, acceptance, consumer.address)
        ),
    )
    share = slash_share(BOND + TOP_UP, SLASH_SHARE_BPS)
    fee = slashed.transaction_body.fee
    assert balance(devnet, consumer.address) - before == (
        refund_amount(LOCKED, ALLOWANCE) + share + ALLOWANCE - fee
    )
    bond = output(slashed, bonds.SLASHED_BOND_OUTPUT)
    assert (bond.output.amount.coin, tokens_at(devnet, bond)) == (BOND + TOP_UP - share, held)

    unbond = await confirm(
        devnet,
        provider.sign(bonds.begin_unbond(devnet.context(), deployment, bond, provider.address)),
    )
    bond = output(unbond, bonds.BOND_OUTPUT)
    datum = bonds.bond_datum(deployment, bond)
    assert isinstance(datum.unbonding_since, Just)
    assert (bond.output.amount.coin, tokens_at(devnet, bond)) == (BOND + TOP_UP - share, held)

    await travel_to(devnet, datum.unbonding_since.value + NOTICE_MS)
    withdrawn = await confirm(
        devnet,
        provider.sign(bonds.withdraw(devnet.context(), deployment, bond, provider.address)),
    )
    back = [u.output.amount.multi_asset for u in devnet.context().utxos(provider.address)
            if u.input.transaction_id == withdrawn.id]  # fmt: skip
    assert sum(back, MultiAsset()) == held
