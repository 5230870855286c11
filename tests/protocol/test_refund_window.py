"""Issue 18 A: a plain refund must not pre-empt the consumer's slash. For the deployment's
refund window after an escrow's close only its consumer refunds (and slashes with it); after
the window anyone may. Each refusal is the chain's, by its trace, beside its honest twin."""

from __future__ import annotations

import pytest

from offchain.protocol.ledger.types import PayoutKind, Refund
from offchain.protocol.tx import bond as bonds
from offchain.protocol.tx import escrow as escrows
from offchain.protocol.tx.txbuild import BuildError
from tests.protocol.onchain import (
    LOCKED,
    OWED,
    REFUND_WINDOW_MS,
    SCRIPT_FAILED,
    SHARE,
    Spend,
    accept,
    balance,
    confirm,
    handmade,
    lock,
    plain_fee,
    post_bond,
    rejected,
    tagged,
    travel_to,
    wallet,
)

IN_WINDOW = "only the consumer refunds in the refund window"


def plain_refund(devnet, deployment, payer, escrow, consumer, *signers):
    """A refund of `escrow` to its consumer, paid by `payer`, valid from the tip, with
    `signers` as the transaction's required signers (what a script sees as signatories)."""
    return handmade(
        devnet, payer, plain_fee(devnet, payer),
        spends=[Spend(escrow, deployment.escrow_ref, lambda own: Refund(own, 0))],
        outputs=[tagged(consumer.address, OWED, PayoutKind.REFUND, escrow)],
        start=devnet.context().last_block_slot, signers=[s.key for s in signers],
    )  # fmt: skip


async def test_in_the_window_a_plain_refund_is_refused_and_the_consumers_slash_goes_through(
    devnet, deployment
):
    """The issue's ordering attack: right after the close the provider (then a stranger)
    refunds first; both are refused, and the consumer's refund + slash that follows pays it
    the escrow and the bond's share."""
    consumer, provider, stranger = [await wallet(devnet) for _ in range(3)]
    bond = await post_bond(devnet, deployment, provider)
    escrow = await lock(devnet, deployment, consumer, provider)
    acceptance = accept(deployment, provider.key, escrow)
    await travel_to(devnet, escrows.escrow_datum(deployment, escrow).close + 1)

    by_provider = plain_refund(devnet, deployment, provider, escrow, consumer, provider)
    await rejected(devnet, by_provider, SCRIPT_FAILED, IN_WINDOW)
    by_stranger = plain_refund(devnet, deployment, stranger, escrow, consumer)
    await rejected(devnet, by_stranger, SCRIPT_FAILED, IN_WINDOW)
    for who in (provider, stranger):  # the builders say so before anything is sent
        with pytest.raises(BuildError, match=r"only the consumer .* may refund"):
            escrows.refund(devnet.context(), deployment, escrow, who.address)
        with pytest.raises(BuildError, match=r"only the consumer .* may refund"):
            bonds.slash(devnet.context(), deployment, escrow, bond, acceptance, who.address)

    before = balance(devnet, consumer.address)
    slash = bonds.slash(devnet.context(), deployment, escrow, bond, acceptance, consumer.address)
    tx = await confirm(devnet, consumer.sign(slash))
    # the refund (all but the allowance), the allowance's rest as change, and the share
    assert balance(devnet, consumer.address) - before == LOCKED + SHARE - tx.transaction_body.fee


async def test_in_the_window_the_consumer_may_refund_without_a_slash(devnet, deployment):
    consumer, provider = [await wallet(devnet) for _ in range(2)]
    escrow = await lock(devnet, deployment, consumer, provider)
    await travel_to(devnet, escrows.escrow_datum(deployment, escrow).close + 1)
    unsigned = plain_refund(devnet, deployment, consumer, escrow, consumer)  # no signatory
    await rejected(devnet, unsigned, SCRIPT_FAILED, IN_WINDOW)
    before = balance(devnet, consumer.address)
    refund = escrows.refund(devnet.context(), deployment, escrow, consumer.address)
    tx = await confirm(devnet, consumer.sign(refund))
    assert balance(devnet, consumer.address) - before == LOCKED - tx.transaction_body.fee


async def test_after_the_window_anyone_refunds(devnet, deployment):
    """No acceptance was ever signed and the consumer is gone: a stranger returns the escrow
    once the window is over (and keeps the allowance's rest after its fee)."""
    consumer, provider, stranger = [await wallet(devnet) for _ in range(3)]
    escrow = await lock(devnet, deployment, consumer, provider)
    close = escrows.escrow_datum(deployment, escrow).close
    await travel_to(devnet, close + REFUND_WINDOW_MS + 1)
    before = [balance(devnet, w.address) for w in (consumer, stranger)]
    refund = escrows.refund(devnet.context(), deployment, escrow, stranger.address)
    assert consumer.key_hash not in (refund.transaction_body.required_signers or [])
    tx = await confirm(devnet, stranger.sign(refund))
    after = [balance(devnet, w.address) for w in (consumer, stranger)]
    assert after[0] - before[0] == OWED
    assert after[1] - before[1] == LOCKED - OWED - tx.transaction_body.fee


async def test_after_the_window_a_strangers_slash_still_pays_the_consumer(devnet, deployment):
    consumer, provider, stranger = [await wallet(devnet) for _ in range(3)]
    bond = await post_bond(devnet, deployment, provider)
    escrow = await lock(devnet, deployment, consumer, provider)
    acceptance = accept(deployment, provider.key, escrow)
    close = escrows.escrow_datum(deployment, escrow).close
    await travel_to(devnet, close + REFUND_WINDOW_MS + 1)
    before = balance(devnet, consumer.address)
    slash = bonds.slash(devnet.context(), deployment, escrow, bond, acceptance, stranger.address)
    await confirm(devnet, stranger.sign(slash))
    assert balance(devnet, consumer.address) - before == OWED + SHARE
