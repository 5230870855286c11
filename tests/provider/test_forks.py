"""The provider daemon under forks, each test on a devnet of its own (a rollback on the
session's devnet would undo other tests' transactions). A settle the payout watcher made and a
rollback undid is settled again, the job's results kept until the spend is `finality_blocks`
deep; the search for a spend whose newest resume point was orphaned starts at the next point
back, not at the chain's origin; an escrow counts as deep enough only once it stayed
`confirm_blocks` deep, and one whose lock is rolled back before that is never accepted by the
daemon (nothing signed, nothing sent to the market); a channel is admitted once its open is
that deep, and never when its open is rolled back while the admission waits; a claim rolled
back is followed back and claimed again. Block times: a wait for a transaction gives up on
evidence, not on a clock: once the chain passes its ttl without it, or another transaction
spent one of its inputs."""

from __future__ import annotations

import asyncio

import pytest
from pycardano import TransactionBuilder, TransactionInput

from offchain.chain.ogmios import request
from offchain.chain.submit import (
    ConfirmationTimeout,
    submit_confirmed,
    tip_point,
    wait_for_confirmations,
)
from offchain.chain.utxo import parse_out_ref, utxo_at
from offchain.protocol.tx import batch
from offchain.protocol.tx import escrow as escrows
from offchain.protocol.tx.txbuild import Clock, out_ref
from provider.config import DaemonSettings
from provider.daemon.chain import Chain
from provider.daemon.channel_claims import ChannelClaimer, admit
from provider.daemon.confirmations import Confirmations
from provider.daemon.journal import Journal
from provider.daemon.payouts import PayoutWatcher
from provider.daemon.resume import point_of
from provider.daemon.spends import spending_transaction
from provider.money.channel_book import ChannelBook
from tests.protocol.channels import iou, open_on
from tests.protocol.onchain import ALLOWANCE, EVIDENCE, PRICE, RESULT, balance, lock, to_settle
from tests.protocol.onchain import wallet as funded
from tests.provider.chain import deployed
from tests.provider.daemon_harness import (
    assignment,
    fake_market_server,
    lock_escrow,
    new_provider,
    safe_terms,
    spec,
)
from tests.provider.test_channels_claims import SETTINGS
from tests.provider.test_payout_watcher import NEAR_CLOSE, UNITS, entry

FINAL = 3  # blocks


async def blocks(devnet, count: int) -> None:
    """`count` more blocks (each a slot later)."""
    for _ in range(count):
        await request(devnet.url, "devnet/advanceTime", {"slots": 1})


async def roll_back_until_gone(devnet, ref: TransactionInput) -> None:
    """Roll the chain back a block at a time until the output `ref` is off it."""
    while utxo_at(devnet.context(), ref) is not None:
        await request(devnet.url, "devnet/rollback", {"blocks": 1})


async def roll_back_past(devnet, height: int) -> None:
    """Roll the chain back until the block at `height` is gone (empty blocks keep coming)."""
    while (tip := await request(devnet.url, "queryNetwork/blockHeight")) >= height:
        await request(devnet.url, "devnet/rollback", {"blocks": tip - height + 1})


async def delivered(devnet, tmp_path):
    """A job delivered on an escrow locked to a new provider, its receipt in the journal:
    (deployment, provider, escrow, the receipt to settle, the provider's chain, journal)."""
    deployment = await deployed(devnet, tmp_path / "deployment.json")
    consumer, provider = await funded(devnet), await funded(devnet)
    escrow = await lock(devnet, deployment, consumer, provider)
    signed = to_settle(deployment, provider.key, escrow, UNITS, RESULT, EVIDENCE)
    journal = Journal(tmp_path / "state")
    journal.save(entry("job", signed, escrows.escrow_datum(deployment, escrow).close))
    chain = Chain(devnet.url, devnet.context(), deployment, provider)
    return deployment, provider, escrow, signed, chain, journal


async def test_a_settle_rolled_back_is_settled_again_and_the_results_kept_until_final(
    own_devnet, tmp_path
):
    devnet = own_devnet
    _, provider, escrow, _, chain, journal = await delivered(devnet, tmp_path)
    results = tmp_path / "results" / "job"
    results.mkdir(parents=True)
    (results / "out.tar").write_bytes(b"the job's results")
    settings = NEAR_CLOSE.model_copy(update={"finality_blocks": FINAL})
    watcher = PayoutWatcher(chain, journal, results.parent, settings)
    before = balance(devnet, provider.address)

    await watcher.tick()
    first = journal.get("job")
    assert first.stage == "settled" and not first.final and (results / "out.tar").exists()

    await roll_back_past(devnet, first.spent_in["height"])
    assert utxo_at(devnet.context(), escrow.input) is not None  # unspent again
    await watcher.tick()  # the rollback seen: open again, and due: settled again
    again = journal.get("job")
    assert again.stage == "settled" and again.spent_in["id"] != first.spent_in["id"]
    assert not again.final and (results / "out.tar").exists()

    await blocks(devnet, FINAL - 1)
    await watcher.tick()
    final = journal.get("job")
    assert final.final and final.settled_lovelace == PRICE * UNITS and not results.exists()
    found = await spending_transaction(devnet.url, escrow.input, final.search_from)
    assert str(found.tx.id) == final.settle_tx  # paid once, by the settle on chain
    fee = found.tx.transaction_body.fee
    assert balance(devnet, provider.address) - before == PRICE * UNITS + ALLOWANCE - fee


async def test_a_search_whose_newest_resume_point_is_orphaned_starts_at_the_next(
    own_devnet, tmp_path
):
    devnet = own_devnet
    deployment, provider, escrow, signed, chain, journal = await delivered(devnet, tmp_path)
    journal.save(journal.get("job").model_copy(update={"unspent_at": chain.tip_point()}))
    not_due = DaemonSettings(payout_margin_ms=0)  # the watcher only watches
    watcher = PayoutWatcher(chain, journal, tmp_path / "results", not_due)
    for _ in range(3):
        await watcher.tick()
        await blocks(devnet, 1)
    newest, survivor, *_ = journal.get("job").resume_points
    assert newest["height"] == survivor["height"] + 1

    await roll_back_past(devnet, newest["height"])  # the newest point's block is orphaned
    settle = batch.settle(devnet.context(), deployment, [signed], provider.address)
    await submit_confirmed(devnet.url, provider.sign(settle))  # as the market would
    watching = journal.get("job")
    found = await spending_transaction(devnet.url, escrow.input, watching.search_from)
    assert found.after == point_of(survivor) and found.tx.id == provider.sign(settle).id

    await watcher.tick()
    settled = journal.get("job")
    assert settled.stage == "settled" and settled.settle_tx == str(found.tx.id)
    assert settled.settled_lovelace == PRICE * UNITS


async def test_an_escrow_counts_once_it_stayed_confirm_blocks_deep(own_devnet, tmp_path):
    devnet = own_devnet
    deployment = await deployed(devnet, tmp_path / "deployment.json")
    consumer, provider = await funded(devnet), await funded(devnet)
    chain = Chain(devnet.url, devnet.context(), deployment, provider)
    gate = Confirmations(chain, FINAL)
    escrow = out_ref(await lock(devnet, deployment, consumer, provider))

    assert not gate.deep_enough(escrow)  # first seen: counted from here
    await blocks(devnet, FINAL - 2)
    assert not gate.deep_enough(escrow)
    await blocks(devnet, 1)
    assert gate.deep_enough(escrow)


async def test_an_escrow_rolled_back_before_its_depth_is_never_accepted(own_devnet, tmp_path):
    """The real daemon (confirm_blocks 3), handed the job by a market that misbehaves on
    purpose: it waits for the escrow's depth, the lock is rolled back, and the daemon never
    signs an acceptance: its journal stays empty, the market hears nothing of the job."""
    devnet = own_devnet
    deployment_file = tmp_path / "deployment.json"
    deployment = await deployed(devnet, deployment_file)
    job = spec("busybox:latest", "echo never")
    with fake_market_server() as (url, pending, seen):
        daemon, provider = await new_provider(
            devnet, tmp_path, deployment_file, url, bundles=1, confirm_blocks=FINAL
        )
        consumer = await funded(devnet)
        terms = safe_terms(consumer, provider, job, Clock.now(devnet.context()).tip_ms)
        escrow = await lock_escrow(devnet, deployment, consumer, terms)
        handed = assignment("job_f", job, escrow, terms)
        shallow = f"escrow {escrow} is not {FINAL} blocks deep yet"
        try:
            await daemon.start().logged("offer published")
            pending.append(handed)
            await daemon.logged(shallow)
            await roll_back_until_gone(devnet, parse_out_ref(escrow))
            pending.append(handed)
            await daemon.logged(shallow, times=2)  # seen, now gone: a fork may bring it back
            pending.append(handed)
            await daemon.logged("job job_f: its refusal releases no escrow")
        finally:
            daemon.stop()
    assert Journal(daemon.state_dir).entries() == []
    assert not any("/jobs/job_f" in line for line in seen), seen


async def channel_opened(devnet, tmp_path):
    """A renter's channel just opened to a new provider, and the provider's empty book:
    (deployment, renter, channel, terms, book, the provider's chain)."""
    deployment = await deployed(devnet, tmp_path / "deployment.json")
    provider, renter = await funded(devnet), await funded(devnet)
    channel, terms, _ = await open_on(devnet, deployment, renter, provider)
    book = ChannelBook(tmp_path / "channels.sqlite", deployment.network_id,
                       deployment.channel_hash, credit=0)  # fmt: skip
    chain = Chain(devnet.url, devnet.context(), deployment, provider)
    return deployment, renter, channel, terms, book, chain


async def channel_admission(devnet, tmp_path):
    """A channel just opened, and its admission (`confirm_blocks` 2) running in a thread:
    (the channel, the book, the task)."""
    _, _, channel, terms, book, chain = await channel_opened(devnet, tmp_path)
    settings = SETTINGS.model_copy(update={"confirm_blocks": 2})
    ref = channel.utxo.input
    admitting = asyncio.create_task(asyncio.to_thread(admit, chain, book, ref, terms, settings))
    return channel, book, admitting


async def test_a_channel_is_admitted_once_its_open_is_deep_enough(own_devnet, tmp_path):
    channel, book, admitting = await channel_admission(own_devnet, tmp_path)
    while not admitting.done():  # each block a chance; the admission follows the chain
        await blocks(own_devnet, 1)
        await asyncio.wait([admitting], timeout=2)
    assert (await admitting).id == channel.id and book.get(channel.id) is not None


async def test_a_channel_whose_open_is_rolled_back_is_never_admitted(own_devnet, tmp_path):
    channel, book, admitting = await channel_admission(own_devnet, tmp_path)
    await roll_back_until_gone(own_devnet, channel.utxo.input)
    with pytest.raises(LookupError, match="no unspent output"):
        await admitting
    assert book.get(channel.id) is None


async def test_a_wait_for_a_transaction_gives_up_once_the_chain_passes_its_ttl(own_devnet):
    since = await tip_point(own_devnet.url)
    never = "00" * 32  # no transaction has this id
    waiting = asyncio.create_task(wait_for_confirmations(
        own_devnet.url, never, since, timeout_s=None, ttl=since["slot"] + 3,
    ))  # fmt: skip
    while not waiting.done():  # however long the chain takes: each block is evidence
        await blocks(own_devnet, 1)
        await asyncio.wait([waiting], timeout=2)
    with pytest.raises(ConfirmationTimeout, match="not on chain by its ttl"):
        await waiting


async def test_a_claim_rolled_back_is_followed_back_and_claimed_again(own_devnet, tmp_path):
    """The book moved to the claim's continuing output; a fork undoes the claim: that output
    is neither unspent nor spent on chain, so the book goes back to the channel's output
    before it (claimed nothing) and the next round claims the IOU again."""
    deployment, renter, channel, terms, book, chain = await channel_opened(own_devnet, tmp_path)
    settings = SETTINGS.model_copy(update={"channel_claim_interval_s": 1})
    admit(chain, book, channel.utxo.input, terms, settings)
    book.accept(iou(deployment, renter, channel, 2_000_000))
    claimer = ChannelClaimer(chain, book, settings)
    await claimer.tick()
    claimed = book.get(channel.id).view
    assert claimed.claimed == 2_000_000 and claimed.utxo != out_ref(channel.utxo)

    await roll_back_until_gone(own_devnet, parse_out_ref(claimed.utxo))
    # the chain's clock past the claim interval since the undone round (the rollback turned
    # it back), read from the chain rather than counted in blocks
    while chain.now_ms() < claimer.last_round_ms + 1000 * settings.channel_claim_interval_s:
        await blocks(own_devnet, 5)
    await claimer.refresh(book.live())
    back = book.get(channel.id)
    assert back.view.utxo == out_ref(channel.utxo) and back.view.claimed == 0

    await claimer.tick()
    again = book.get(channel.id).view
    assert again.claimed == 2_000_000 and utxo_at(own_devnet.context(), parse_out_ref(again.utxo))


async def test_a_wait_gives_up_once_another_transaction_spends_its_input(own_devnet):
    payer = await funded(own_devnet)
    context = own_devnet.context()
    (coin,) = context.utxos(payer.address)
    since = await tip_point(own_devnet.url)
    waiting = asyncio.create_task(wait_for_confirmations(
        own_devnet.url, "00" * 32, since, timeout_s=None, inputs={coin.input},
    ))  # fmt: skip
    builder = TransactionBuilder(context)
    builder.add_input(coin)
    other = builder.build_and_sign([payer.key], change_address=payer.address)
    await submit_confirmed(own_devnet.url, other)  # spends the coin the awaited one needs
    with pytest.raises(ConfirmationTimeout, match=f"{other.id} spent an input"):
        await waiting
