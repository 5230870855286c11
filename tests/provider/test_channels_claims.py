"""The provider's channel claims on the session's devnet: renters open channels to the provider,
which admits them to its book (checked on chain) and takes their IOUs; its claim schedule
claims every channel's latest IOU in one transaction, to the lovelace, then waits for the next
interval; a channel whose renter starts a close is claimed at once, by a schedule started
afresh on the same book; a drained channel leaves the book; a channel that cannot be claimed
holds up no other; a top-up is seen and lets IOUs grow."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from devnet.genesis import ADA
from offchain.chain.submit import tip_point
from offchain.protocol.tx import channel as channels
from offchain.protocol.tx.channel import ChannelRefused, read_channel
from offchain.protocol.tx.deployment import Deployment
from offchain.protocol.tx.txbuild import Wallet
from provider.config import DaemonSettings
from provider.daemon.chain import Chain
from provider.daemon.channel_claims import ChannelClaimer, admit
from provider.money.channel_book import ChannelBook, IouAboveChannel
from tests.protocol.channels import CLOSE_MS, DEPOSIT, iou, open_on
from tests.protocol.onchain import balance, confirm, travel_to, tx_fee, wallet
from tests.provider.chain import deployed

HOUR_S = 3600
SETTINGS = DaemonSettings(
    channel_claim_interval_s=HOUR_S, channel_min_deposit_lovelace=DEPOSIT,
    channel_min_close_period_ms=CLOSE_MS,
)  # fmt: skip


@pytest.fixture(scope="module")
async def deployment(devnet, tmp_path_factory) -> Deployment:
    return await deployed(devnet, tmp_path_factory.mktemp("deployment") / "deployment.json")


def chain_of(devnet, deployment: Deployment, provider: Wallet) -> Chain:
    return Chain(devnet.url, devnet.context(), deployment, provider)


def book_at(path: Path, deployment: Deployment) -> ChannelBook:
    return ChannelBook(path, deployment.network_id, deployment.channel_hash, credit=0)


async def opened(devnet, deployment: Deployment, provider: Wallet, book: ChannelBook):
    """A new renter's channel to `provider`, admitted to `book`."""
    renter = await wallet(devnet)
    channel, terms, _ = await open_on(devnet, deployment, renter, provider)
    chain = chain_of(devnet, deployment, provider)
    admit(chain, book, channel.utxo.input, terms, SETTINGS)
    return renter, channel, terms


async def test_the_schedule_claims_every_latest_iou_in_one_transaction(
    devnet, deployment: Deployment, tmp_path: Path
) -> None:
    provider = await wallet(devnet)
    book = book_at(tmp_path / "channels.sqlite", deployment)
    first, second = [await opened(devnet, deployment, provider, book) for _ in range(2)]
    for renter, channel, _ in (first, second):
        for amount in (1_000_000, 2_500_000):
            book.accept(iou(deployment, renter, channel, amount))
    book.accept(iou(deployment, second[0], second[1], 4_000_000))  # the second's latest
    chain = chain_of(devnet, deployment, provider)
    claimer = ChannelClaimer(chain, book, SETTINGS)
    before = balance(devnet, provider.address)
    since = await tip_point(devnet.url)

    await claimer.tick()

    one, two = (book.get(c.id) for _, c, _ in (first, second))
    assert one.view.claimed == 2_500_000 and two.view.claimed == 4_000_000
    assert one.unclaimed == two.unclaimed == 0
    claim_tx = one.view.utxo.split("#")[0]
    assert two.view.utxo.split("#")[0] == claim_tx  # one transaction claimed both
    fee = await tx_fee(devnet, claim_tx, since)
    assert balance(devnet, provider.address) - before == 6_500_000 - fee
    for entry, (_, channel, _) in ((one, first), (two, second)):
        on_chain = read_channel(deployment, chain.utxo(entry.view.utxo))
        assert on_chain.datum.claimed == entry.view.claimed
        assert on_chain.lovelace == channel.lovelace - entry.view.claimed

    book.accept(iou(deployment, first[0], first[1], 3_000_000))
    await claimer.tick()  # the interval has not run: nothing is claimed
    assert book.get(first[1].id).unclaimed == 500_000


async def test_a_closing_channel_is_claimed_at_once_and_a_drained_one_leaves_the_book(
    devnet, deployment: Deployment, tmp_path: Path
) -> None:
    provider = await wallet(devnet)
    path = tmp_path / "channels.sqlite"
    book = book_at(path, deployment)
    renter, channel, terms = await opened(devnet, deployment, provider, book)
    chain = chain_of(devnet, deployment, provider)
    await ChannelClaimer(chain, book, SETTINGS).tick()  # nothing owed yet: nothing claimed
    book.accept(iou(deployment, renter, channel, 1_500_000))
    book.close()
    close = channels.start_close(devnet.context(), deployment, channel, terms, renter.address)
    await confirm(devnet, renter.sign(close))
    book = book_at(path, deployment)  # the daemon started again: the book is its state
    claimer = ChannelClaimer(chain, book, SETTINGS)
    claimer.last_round_ms = chain.now_ms()  # a round just claimed all: only a close is due
    before = balance(devnet, provider.address)
    since = await tip_point(devnet.url)

    await claimer.tick()

    entry = book.get(channel.id)
    assert entry.view.claimed == 1_500_000 and entry.view.closing_at >= 0
    assert not book.may_serve(channel.id, 1_500_000)  # no more service once it closes
    fee = await tx_fee(devnet, entry.view.utxo.split("#")[0], since)
    assert balance(devnet, provider.address) - before == 1_500_000 - fee

    await travel_to(devnet, entry.view.closing_at + 1)
    closed = read_channel(deployment, chain.utxo(entry.view.utxo))
    drain = channels.drain(devnet.context(), deployment, closed, terms, renter.address)
    await confirm(devnet, renter.sign(drain))
    await claimer.tick()
    assert book.live() == [] and book.get(channel.id).ended


async def test_a_channel_for_another_provider_is_not_admitted(
    devnet, deployment: Deployment, tmp_path: Path
) -> None:
    provider, other = await wallet(devnet), await wallet(devnet)
    renter = await wallet(devnet)
    channel, terms, _ = await open_on(devnet, deployment, renter, other)
    book = book_at(tmp_path / "channels.sqlite", deployment)
    with pytest.raises(ChannelRefused, match="another payout address"):
        admit(chain_of(devnet, deployment, provider), book, channel.utxo.input, terms, SETTINGS)
    assert book.get(channel.id) is None


async def test_a_channel_that_cannot_be_claimed_does_not_hold_up_the_one_beside_it(
    devnet, deployment: Deployment, tmp_path: Path, caplog
) -> None:
    """An IOU the chain cannot pay (taken while the book believed the channel held more, as
    after a rise in the ledger's minimum UTxO) fails its batch: the other channel is claimed
    alone, the failing one is logged and left for the next round."""
    provider = await wallet(devnet)
    book = book_at(tmp_path / "channels.sqlite", deployment)
    (renter, short, _), (other, good, _) = [
        await opened(devnet, deployment, provider, book) for _ in range(2)
    ]
    believed = book.get(short.id).view
    book.seen(dataclasses.replace(believed, capacity=believed.capacity + 10 * ADA))
    book.accept(iou(deployment, renter, short, believed.capacity + ADA))  # more than it holds
    book.accept(iou(deployment, other, good, 2_000_000))
    chain = chain_of(devnet, deployment, provider)

    await ChannelClaimer(chain, book, SETTINGS).tick()

    assert book.get(good.id).view.claimed == 2_000_000
    assert book.get(short.id).view == believed  # read again from the chain, nothing claimed
    assert f"on channel {short.id.hex()}" in caplog.text


async def test_a_top_up_is_seen_and_raises_what_an_iou_may_be(
    devnet, deployment: Deployment, tmp_path: Path
) -> None:
    provider = await wallet(devnet)
    book = book_at(tmp_path / "channels.sqlite", deployment)
    renter, channel, terms = await opened(devnet, deployment, provider, book)
    capacity = book.get(channel.id).view.capacity
    assert capacity == DEPOSIT  # the open's return deposit keeps the continuing output
    with pytest.raises(IouAboveChannel):
        book.accept(iou(deployment, renter, channel, DEPOSIT + ADA))
    tx = channels.top_up(devnet.context(), deployment, channel, terms, 5 * ADA, renter.address)
    await confirm(devnet, renter.sign(tx))
    chain = chain_of(devnet, deployment, provider)

    await ChannelClaimer(chain, book, SETTINGS).tick()  # nothing owed: it only reads the chain

    seen = book.get(channel.id).view
    assert seen.capacity == DEPOSIT + 5 * ADA and seen.utxo == f"{tx.id}#0"
    book.accept(iou(deployment, renter, channel, DEPOSIT + ADA))
