"""The claim schedule follows a channel by the chain's own word: anyone may pay the channel's
address an output with a copy of its datum (claimed lower, a little ADA), and a renter who made
one and then moves the real channel (a top-up, a start of close, a drain) must not lead the
daemon to the copy. Each move between two rounds is read from the spending transaction's
redeemers: the closing channel is claimed at once, before its close, and a drained one ends,
while the copy sits untouched at the address."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from pycardano import TransactionInput, TransactionOutput

from devnet.genesis import ADA
from offchain.chain.submit import tip_point
from offchain.chain.utxo import parse_out_ref, utxo_at
from offchain.protocol.tx import channel as channels
from offchain.protocol.tx.channel import Channel, read_channel
from offchain.protocol.tx.deployment import Deployment
from offchain.protocol.tx.txbuild import Wallet, add_output, build, new_builder
from provider.daemon.channel_claims import ChannelClaimer
from tests.protocol.channels import iou, left
from tests.protocol.onchain import balance, confirm, travel_to, tx_fee, wallet
from tests.provider.chain import deployed
from tests.provider.test_channels_claims import SETTINGS, book_at, chain_of, opened

COPY_LOVELACE = 3 * ADA


@pytest.fixture(scope="module")
async def deployment(devnet, tmp_path_factory) -> Deployment:
    return await deployed(devnet, tmp_path_factory.mktemp("deployment") / "deployment.json")


async def forged(devnet, renter: Wallet, channel: Channel, claimed: int) -> TransactionInput:
    """A copy of `channel`'s datum with `claimed`, paid by `renter` to its address by hand."""
    builder = new_builder(devnet.context())
    builder.add_input_address(renter.address)
    datum = dataclasses.replace(channel.datum, claimed=claimed)
    add_output(builder, TransactionOutput(channel.utxo.output.address, COPY_LOVELACE, datum=datum))
    tx = await confirm(devnet, renter.sign(build(builder, renter.address)))
    return TransactionInput(tx.id, 0)


def on_chain(devnet, deployment: Deployment, ref: TransactionInput) -> Channel:
    utxo = utxo_at(devnet.context(), ref)
    assert utxo is not None
    return read_channel(deployment, utxo)


async def test_a_topped_up_and_closing_channel_is_followed_past_a_copy_and_claimed_at_once(
    devnet, deployment: Deployment, tmp_path: Path
) -> None:
    provider = await wallet(devnet)
    book = book_at(tmp_path / "channels.sqlite", deployment)
    renter, channel, terms = await opened(devnet, deployment, provider, book)
    chain = chain_of(devnet, deployment, provider)
    claimer = ChannelClaimer(chain, book, SETTINGS)
    book.accept(iou(deployment, renter, channel, 1_000_000))
    await claimer.tick()  # the first round claims it: the channel has claimed 1_000_000
    real = on_chain(devnet, deployment, parse_out_ref(book.get(channel.id).view.utxo))
    assert real.datum.claimed == 1_000_000
    copy = await forged(devnet, renter, real, claimed=0)
    book.accept(iou(deployment, renter, channel, 1_700_000))
    top_up = channels.top_up(devnet.context(), deployment, real, terms, 5 * ADA, renter.address)
    await confirm(devnet, renter.sign(top_up))
    close = channels.start_close(
        devnet.context(), deployment, left(deployment, top_up), terms, renter.address
    )
    await confirm(devnet, renter.sign(close))
    closing_at = left(deployment, close).datum.closing_at
    claimer.last_round_ms = chain.now_ms()  # a round just claimed all: only a close is due
    before = balance(devnet, provider.address)
    since = await tip_point(devnet.url)

    await claimer.tick()

    entry = book.get(channel.id)
    assert entry.view.closing_at == closing_at and entry.view.claimed == 1_700_000
    claim_tx = entry.view.utxo.split("#")[0]
    fee = await tx_fee(devnet, claim_tx, since)
    assert balance(devnet, provider.address) - before == 700_000 - fee
    claimed = on_chain(devnet, deployment, parse_out_ref(entry.view.utxo))
    assert claimed.datum.closing_at == closing_at  # claimed before its close, by the script
    assert claimed.lovelace == real.lovelace + 5 * ADA - 700_000
    assert on_chain(devnet, deployment, copy).datum.claimed == 0  # the copy is left alone


async def test_a_drained_channel_ends_while_a_copy_sits_at_its_address(
    devnet, deployment: Deployment, tmp_path: Path
) -> None:
    provider = await wallet(devnet)
    book = book_at(tmp_path / "channels.sqlite", deployment)
    renter, channel, terms = await opened(devnet, deployment, provider, book)
    copy = await forged(devnet, renter, channel, claimed=0)
    close = channels.start_close(devnet.context(), deployment, channel, terms, renter.address)
    await confirm(devnet, renter.sign(close))
    closed = left(deployment, close)
    await travel_to(devnet, closed.datum.closing_at + 1)
    drain = channels.drain(devnet.context(), deployment, closed, terms, renter.address)
    await confirm(devnet, renter.sign(drain))

    await ChannelClaimer(chain_of(devnet, deployment, provider), book, SETTINGS).tick()

    assert book.live() == [] and book.get(channel.id).ended
    assert utxo_at(devnet.context(), copy) is not None
