"""A provider paid at a cold address (`daemon.payout_address`), on the session's devnet: its
hot key signs acceptances, receipts and claims and its wallet pays the fees, while every
lovelace it earns goes to the cold address, to the lovelace: a job the market settles (the
daemon's offer names the cold address; real market, real docker), a job the daemon settles
itself (price x units), a small payout (raised to the minimum UTxO from the hot wallet), a
channel's claim. Escrows and channels paying the hot address instead are refused, and the net income
`provider status` shows is the change of the two addresses together. (Its acceptances:
tests/protocol/test_escrow_check.py; its bond: tests/protocol/test_bond_owner.py.)"""

from __future__ import annotations

import pytest
from pycardano import Network, PaymentSigningKey

from offchain.chain.submit import tip_point
from offchain.protocol.checks.refusal import Refusal
from offchain.protocol.job.outcome import Outcome
from offchain.protocol.tx import batch
from offchain.protocol.tx import escrow as escrows
from offchain.protocol.tx.channel import ChannelRefused
from offchain.protocol.tx.deployment import Deployment
from offchain.protocol.tx.txbuild import Wallet
from provider.config import DaemonSettings
from provider.daemon.chain import Chain
from provider.daemon.channel_claims import ChannelClaimer, admit
from provider.daemon.journal import Journal
from provider.daemon.payouts import PayoutWatcher
from provider.money.own_transactions import OwnTransactions
from tests.protocol import onchain
from tests.protocol.channels import iou, open_on
from tests.protocol.onchain import (
    ALLOWANCE,
    EVIDENCE,
    LOCKED,
    PRICE,
    RESULT,
    balance,
    tx_fee,
    wallet,
)
from tests.provider.chain import deployed
from tests.provider.daemon_harness import (
    CORE_PRICE,
    consumer_of,
    daemon_on_market,
    provider_share,
    request_and_lock,
    settling_market,
    spec,
    wait_state,
)
from tests.provider.test_channels_claims import SETTINGS as CHANNELS
from tests.provider.test_channels_claims import book_at
from tests.provider.test_payout_watcher import NEAR_CLOSE, SMALL, UNITS, entry


@pytest.fixture(scope="module")
async def deployment(devnet, tmp_path_factory) -> Deployment:
    return await deployed(devnet, tmp_path_factory.mktemp("deployment") / "deployment.json")


def cold_wallet() -> Wallet:
    """A cold wallet: its key stays with the test, never with the provider."""
    return Wallet.of(PaymentSigningKey.generate(), Network.TESTNET)


def balances(devnet, *wallets: Wallet) -> list[int]:
    return [balance(devnet, w.address) for w in wallets]


def chain_paid_at(devnet, deployment, hot: Wallet, cold: Wallet, state) -> Chain:
    own = OwnTransactions.in_state_dir(state)
    return Chain(devnet.url, devnet.context(), deployment, hot, own, payout_to=cold.address)


async def test_a_job_the_daemon_settles_pays_the_cold_address_price_times_units(
    devnet, deployment, tmp_path
):
    consumer, hot, cold = await wallet(devnet), await wallet(devnet), cold_wallet()
    escrow = await onchain.lock(devnet, deployment, consumer, hot, paid_at=cold.address)
    journal = Journal(tmp_path / "state")
    signed = onchain.to_settle(deployment, hot.key, escrow, UNITS, RESULT, EVIDENCE)
    journal.save(entry("job", signed, escrows.escrow_datum(deployment, escrow).close))
    chain = chain_paid_at(devnet, deployment, hot, cold, tmp_path / "state")
    watcher = PayoutWatcher(chain, journal, tmp_path / "results", NEAR_CLOSE)
    before = balances(devnet, consumer, hot, cold)
    since = await tip_point(devnet.url)

    await watcher.tick()

    settled = journal.get("job")
    assert settled is not None and settled.stage == "settled"
    assert settled.settled_lovelace == PRICE * UNITS
    fee = await tx_fee(devnet, settled.settle_tx, since)
    gains = [now - then for now, then in zip(balances(devnet, consumer, hot, cold), before,
                                             strict=True)]  # fmt: skip
    assert gains == [LOCKED - PRICE * UNITS - ALLOWANCE, ALLOWANCE - fee, PRICE * UNITS]
    income = chain.own.income(payouts=settled.settled_lovelace, claimed=0)
    assert (income.fees, income.net) == (fee, gains[1] + gains[2])


async def test_a_small_payout_to_the_cold_address_is_raised_from_the_hot_wallet(
    devnet, deployment, tmp_path
):
    """Below the minimum UTxO the market leaves it to the provider, whose hot wallet raises
    the cold address's output: lovelace moved between its own addresses, not income."""
    consumer, hot, cold = await wallet(devnet), await wallet(devnet), cold_wallet()
    least = batch.payout_minimum(devnet.context(), cold.address)
    assert 0 < PRICE * SMALL < least
    escrow = await onchain.lock(devnet, deployment, consumer, hot, paid_at=cold.address)
    journal = Journal(tmp_path / "state")
    signed = onchain.to_settle(deployment, hot.key, escrow, SMALL, RESULT, EVIDENCE)
    stopped = entry("stopped", signed, escrows.escrow_datum(deployment, escrow).close)
    journal.save(stopped.model_copy(update={"outcome": Outcome.CANCELLED}))  # settled at once
    chain = chain_paid_at(devnet, deployment, hot, cold, tmp_path / "state")
    settings = DaemonSettings(payout_margin_ms=0, settle_batch_max=9, small_payout_wait_ms=10**9)
    watcher = PayoutWatcher(chain, journal, tmp_path / "results", settings)
    before = balances(devnet, consumer, hot, cold)
    since = await tip_point(devnet.url)

    await watcher.tick()

    settled = journal.get("stopped")
    assert settled is not None and settled.stage == "settled", settled
    fee = await tx_fee(devnet, settled.settle_tx, since)
    gains = [now - then for now, then in zip(balances(devnet, consumer, hot, cold), before,
                                             strict=True)]  # fmt: skip
    raised = least - PRICE * SMALL
    assert gains == [LOCKED - PRICE * SMALL - ALLOWANCE, ALLOWANCE - fee - raised, least]
    income = chain.own.income(payouts=settled.settled_lovelace, claimed=0)
    assert income.net == PRICE * SMALL + ALLOWANCE - fee == gains[1] + gains[2]


async def test_a_channel_claim_pays_the_cold_address_and_the_hot_wallet_the_fee(
    devnet, deployment, tmp_path
):
    hot, cold, renter = await wallet(devnet), cold_wallet(), await wallet(devnet)
    chain = chain_paid_at(devnet, deployment, hot, cold, tmp_path / "state")
    book = book_at(tmp_path / "channels.sqlite", deployment)
    to_hot, hot_terms, _ = await open_on(devnet, deployment, renter, hot)
    with pytest.raises(ChannelRefused) as refused:  # its terms pay the hot key's own address
        admit(chain, book, to_hot.utxo.input, hot_terms, CHANNELS)
    assert refused.value.reason is Refusal.OTHER_ADDRESS
    channel, terms, _ = await open_on(devnet, deployment, renter, Wallet(hot.key, cold.address))
    admit(chain, book, channel.utxo.input, terms, CHANNELS)
    book.accept(iou(deployment, renter, channel, 3_000_000))
    before = balance(devnet, hot.address), balance(devnet, cold.address)
    since = await tip_point(devnet.url)

    await ChannelClaimer(chain, book, CHANNELS).tick()

    claimed = book.get(channel.id)
    assert claimed is not None and claimed.view.claimed == 3_000_000
    fee = await tx_fee(devnet, claimed.view.utxo.split("#")[0], since)
    assert balance(devnet, cold.address) - before[1] == 3_000_000
    assert balance(devnet, hot.address) - before[0] == -fee
    assert chain.own.income(payouts=0, claimed=3_000_000).net == 3_000_000 - fee


async def test_the_daemon_offers_its_cold_address_and_a_settled_job_pays_it(
    devnet, tmp_path, busybox
):
    """`provider run` with `daemon.payout_address`: its offer names the cold address, the
    quote and the escrow pay it, the market settles, and the cold address receives exactly
    price x units while the hot wallet, which only signed, is untouched (the market paid the
    fee)."""
    cold = cold_wallet()
    deployment_file, deployment, settings = await settling_market(devnet, tmp_path)
    async with daemon_on_market(
        devnet, tmp_path, deployment_file, settings, bundles=1, payout_address=str(cold.address)
    ) as (daemon, hot, url):
        published = next(line for line in daemon.log().splitlines() if "offer published" in line)
        assert f"payout to {cold.address}" in published
        before = balances(devnet, hot, cold)
        async with consumer_of(devnet, url) as consumer:
            script = "echo result > /out/answer"
            job = await request_and_lock(devnet, deployment, consumer, spec(busybox, script))
            assert job.params["provider"] == str(cold.address)
            assert job.params["provider_vkey"] == hot.vkey.hex()
            status = await wait_state(consumer, job.job, {"settled"}, timeout_s=120)
    units = status["receipt_units"]
    assert units >= 1 and provider_share(job, units) == CORE_PRICE * units
    assert balances(devnet, hot, cold) == [before[0], before[1] + CORE_PRICE * units]
