"""The chain follower's channel index on the devnet (each database): a channel its provider
ends and one both parties close are told apart by their redeemer; anything else locked at the
channel script is no channel; and, on a devnet of the test's own, a rollback takes a claim and
then the open back out of the index, each coming back when its transaction lands again."""

from __future__ import annotations

from pycardano import TransactionOutput

from offchain.chain.submit import submit_and_wait
from offchain.chain.utxo import format_out_ref
from offchain.market.models import Channel, ChannelEvent
from offchain.protocol.tx import channel as channels
from offchain.protocol.tx.txbuild import add_inputs, build, fee_inputs, new_builder, sign_tx
from tests.market.channel_flow import claim, forgotten, indexed, moves, seen
from tests.market.flow import stored
from tests.market.test_rollback import own_market, rollback_past  # noqa: F401 - a fixture
from tests.protocol.channels import open_on
from tests.protocol.onchain import ADA, confirm, wallet


async def test_an_end_and_a_mutual_close_are_told_apart(devnet, market_deployment, http):
    deployment = market_deployment
    renter, provider = [await wallet(devnet) for _ in range(2)]
    ended, terms, _ = await open_on(devnet, deployment, renter, provider)
    await indexed(http, ended, 1)
    end = channels.provider_end(devnet.context(), deployment, ended, terms, provider.address)
    end_tx = await confirm(devnet, provider.sign(end))
    page = await indexed(http, ended, 2)
    assert moves(page)[-1] == ("end", ended.lovelace, end_tx.id.payload.hex())
    assert (page["channel"]["state"], page["channel"]["ref"]) == ("ended", None)

    both, terms, _ = await open_on(devnet, deployment, renter, provider)
    await indexed(http, both, 1)
    close = channels.mutual_close(
        devnet.context(), deployment, both, terms, renter.address, 6 * ADA
    )
    close_tx = await confirm(devnet, sign_tx(renter.sign(close), provider.key))
    page = await indexed(http, both, 2)
    assert moves(page)[-1] == ("mutual-close", 0, close_tx.id.payload.hex())
    assert (page["channel"]["state"], page["channel"]["remaining"]) == ("closed", 0)


async def test_a_copy_of_a_channels_datum_is_no_channel(devnet, market_deployment, http, settings):
    """Anyone can lock anything at the channel script: an output holding a channel's datum
    with no terms in its transaction's metadata is not indexed, and the channel is still the
    one its open made."""
    deployment = market_deployment
    renter, provider, stranger = [await wallet(devnet) for _ in range(3)]
    channel, _, _ = await open_on(devnet, deployment, renter, provider)
    await indexed(http, channel, 1)
    builder = new_builder(devnet.context())
    builder.add_output(TransactionOutput(channel.utxo.output.address, 5 * ADA,
                                         datum=channel.datum))  # fmt: skip
    add_inputs(builder, fee_inputs(devnet.context(), stranger.address, 6 * ADA))
    copy = await confirm(devnet, stranger.sign(build(builder, stranger.address)))
    await seen(http, copy)
    rows = stored(settings, Channel, Channel.id == channel.id.hex())
    assert [row.ref for row in rows] == [format_out_ref(channel.utxo.input)]
    assert stored(settings, ChannelEvent, ChannelEvent.tx_id == copy.id.payload.hex()) == []


async def test_rollbacks_take_a_claim_then_the_open_back_and_both_come_back(
    own_devnet,
    own_market,  # noqa: F811
):
    settings, http, deployment = own_market
    renter, provider = [await wallet(own_devnet) for _ in range(2)]
    channel, _, opened = await open_on(own_devnet, deployment, renter, provider)
    opened_at = (await indexed(http, channel, 1))["events"][0]["height"]
    claimed, _ = await claim(own_devnet, deployment, renter, provider, channel, 2 * ADA)
    page = await indexed(http, channel, 2)
    claim_height = page["events"][1]["height"]

    await rollback_past(own_devnet, claim_height)
    page = await indexed(http, channel, 1)
    assert (page["channel"]["claimed"], page["channel"]["remaining"]) == (0, channel.lovelace)
    assert page["channel"]["ref"] == format_out_ref(channel.utxo.input)
    await submit_and_wait(own_devnet.url, claimed)  # lands again
    page = await indexed(http, channel, 2)
    assert moves(page)[-1] == ("claim", 2 * ADA, claimed.id.payload.hex())

    await rollback_past(own_devnet, opened_at)
    await forgotten(http, channel)
    assert stored(settings, ChannelEvent) == []
    await submit_and_wait(own_devnet.url, renter.sign(opened))
    await submit_and_wait(own_devnet.url, claimed)
    page = await indexed(http, channel, 2)
    assert [m[0] for m in moves(page)] == ["open", "claim"]
    assert page["channel"]["claimed"] == 2 * ADA
