"""The provider's own payout watcher on the session's devnet: a receipt it cannot settle (here
signed by another key) is logged and left, and the good receipt batched with it still settles
(before, the batch's failure ended the round, every round, for every receipt after it); small
payouts, which the market leaves to their provider, are settled without waiting for the
close, its own change raising its own output."""

from __future__ import annotations

from pycardano import PaymentSigningKey

from offchain.chain.submit import tip_point
from offchain.protocol.job.jobspec import JobSpec
from offchain.protocol.job.outcome import Outcome
from offchain.protocol.job.receipt import EMPTY_HASH
from offchain.protocol.tx import batch
from offchain.protocol.tx import escrow as escrows
from offchain.protocol.tx.txbuild import out_ref
from provider.config import DaemonSettings
from provider.daemon.chain import Chain
from provider.daemon.journal import JobEntry, Journal
from provider.daemon.payouts import PayoutWatcher
from provider.money.own_transactions import OwnTransactions
from tests.market.test_lifecycle import SPEC
from tests.protocol.onchain import (
    ALLOWANCE,
    EVIDENCE,
    LOCKED,
    PRICE,
    RESULT,
    balance,
    lock,
    to_settle,
    tx_fee,
    wallet,
)
from tests.provider.chain import deployed

UNITS = 1_000  # 2 ADA at PRICE: above the min-UTxO
SMALL = 10  # 0.02 ADA at PRICE: below it
NEAR_CLOSE = DaemonSettings(payout_margin_ms=10**12, settle_batch_max=2)  # every escrow is due


def entry(name: str, signed: batch.ToSettle, close_ms: int) -> JobEntry:
    """A job the daemon delivered, its signed receipt waiting to be collected."""
    escrow, receipt = signed
    return JobEntry(
        job_id=name, escrow=out_ref(escrow), spec=JobSpec.model_validate(SPEC),
        price_per_unit=PRICE, gpu_uuids=[], slot=0, close_ms=close_ms, stage="delivered",
        accepted_at_ms=0, receipt=receipt,
    )  # fmt: skip


async def test_a_receipt_that_cannot_settle_does_not_hold_up_the_one_beside_it(devnet, tmp_path):
    deployment = await deployed(devnet, tmp_path / "deployment.json")
    consumer, provider = await wallet(devnet), await wallet(devnet)
    stranger = PaymentSigningKey.generate()
    journal = Journal(tmp_path / "state")
    for name, key in (("a-signed-by-a-stranger", stranger), ("b-good", provider.key)):
        escrow = await lock(devnet, deployment, consumer, provider)
        signed = to_settle(deployment, key, escrow, UNITS, RESULT, EVIDENCE)
        close = escrows.escrow_datum(deployment, escrow).close
        journal.save(entry(name, signed, close))
    chain = Chain(devnet.url, devnet.context(), deployment, provider)
    watcher = PayoutWatcher(chain, journal, tmp_path / "results", NEAR_CLOSE)

    await watcher.tick()

    bad, good = journal.get("a-signed-by-a-stranger"), journal.get("b-good")
    assert bad is not None and bad.stage == "delivered" and bad.settle_tx is None
    assert good is not None and good.stage == "settled"
    assert good.settled_lovelace == PRICE * UNITS


async def test_the_watcher_settles_a_zero_unit_receipt_the_market_left(devnet, tmp_path):
    """A refused job's zero-unit receipt, undelivered: near the close the provider settles it
    itself, the renter gets all but the allowance, and the provider's wallet, which paid the
    fee, keeps the allowance's rest (it was owed nothing, and gets no payout output)."""
    deployment = await deployed(devnet, tmp_path / "deployment.json")
    consumer, provider = await wallet(devnet), await wallet(devnet)
    escrow = await lock(devnet, deployment, consumer, provider)
    zero = to_settle(deployment, provider.key, escrow, 0, EMPTY_HASH, EMPTY_HASH)
    close = escrows.escrow_datum(deployment, escrow).close
    refused = entry("refused", zero, close).model_copy(
        update={"stage": "finished", "reason": "refused by the provider: no slot fits"}
    )
    journal = Journal(tmp_path / "state")
    journal.save(refused)
    own = OwnTransactions.in_state_dir(tmp_path / "state")
    chain = Chain(devnet.url, devnet.context(), deployment, provider, own)
    watcher = PayoutWatcher(chain, journal, tmp_path / "results", NEAR_CLOSE)
    before = balance(devnet, consumer.address), balance(devnet, provider.address)
    since = await tip_point(devnet.url)

    await watcher.tick()

    settled = journal.get("refused")
    assert settled is not None and settled.stage == "refunded" and settled.settled_lovelace == 0
    assert balance(devnet, consumer.address) - before[0] == LOCKED - ALLOWANCE
    fee = await tx_fee(devnet, settled.settle_tx, since)
    assert balance(devnet, provider.address) - before[1] == ALLOWANCE - fee
    income = own.income(payouts=0, claimed=0)  # what `provider status` shows
    assert (income.allowances, income.fees, income.net) == (ALLOWANCE, fee, ALLOWANCE - fee)


async def test_small_payouts_are_settled_by_their_provider_without_waiting_for_the_close(
    devnet, tmp_path
):
    """Two delivered receipts paying less than the ledger's minimum UTxO: the first waits for
    a full batch (settle_batch_max 2, the wait far off), with the second both settle in one
    transaction from the provider's wallet, long before the close. No top-up: each renter
    gets all but the job's price and the allowance, the provider its pay and the allowances
    less the fee: the net income `provider status` shows, to the lovelace."""
    deployment = await deployed(devnet, tmp_path / "deployment.json")
    consumer, provider = await wallet(devnet), await wallet(devnet)
    assert 0 < PRICE * SMALL < batch.payout_minimum(devnet.context(), provider.address)
    journal = Journal(tmp_path / "state")
    own = OwnTransactions.in_state_dir(tmp_path / "state")
    chain = Chain(devnet.url, devnet.context(), deployment, provider, own)
    settings = DaemonSettings(payout_margin_ms=0, settle_batch_max=2, small_payout_wait_ms=10**9)
    watcher = PayoutWatcher(chain, journal, tmp_path / "results", settings)
    escrows_made = [await lock(devnet, deployment, consumer, provider) for _ in range(2)]
    before = balance(devnet, consumer.address), balance(devnet, provider.address)
    since = await tip_point(devnet.url)
    for name, escrow in zip(("first", "second"), escrows_made, strict=True):
        signed = to_settle(deployment, provider.key, escrow, SMALL, RESULT, EVIDENCE)
        journal.save(entry(name, signed, escrows.escrow_datum(deployment, escrow).close))
        await watcher.tick()
        if name == "first":
            assert journal.get("first").stage == "delivered"  # waits for a fuller batch

    first, second = journal.get("first"), journal.get("second")
    assert first.stage == second.stage == "settled" and first.settle_tx == second.settle_tx
    assert first.settled_lovelace == second.settled_lovelace == PRICE * SMALL
    fee = await tx_fee(devnet, first.settle_tx, since)
    assert balance(devnet, consumer.address) - before[0] == 2 * (LOCKED - PRICE * SMALL - ALLOWANCE)
    assert balance(devnet, provider.address) - before[1] == 2 * (PRICE * SMALL + ALLOWANCE) - fee
    income = own.income(payouts=first.settled_lovelace + second.settled_lovelace, claimed=0)
    assert income.net == balance(devnet, provider.address) - before[1]


async def test_a_cancelled_jobs_small_payout_is_settled_at_once(devnet, tmp_path):
    """Its renter waits at `job cancel` for the money: no batch to fill, no wait."""
    deployment = await deployed(devnet, tmp_path / "deployment.json")
    consumer, provider = await wallet(devnet), await wallet(devnet)
    journal = Journal(tmp_path / "state")
    own = OwnTransactions.in_state_dir(tmp_path / "state")
    chain = Chain(devnet.url, devnet.context(), deployment, provider, own)
    settings = DaemonSettings(payout_margin_ms=0, settle_batch_max=9, small_payout_wait_ms=10**9)
    watcher = PayoutWatcher(chain, journal, tmp_path / "results", settings)
    escrow = await lock(devnet, deployment, consumer, provider)
    before = balance(devnet, consumer.address)
    signed = to_settle(deployment, provider.key, escrow, SMALL, RESULT, EVIDENCE)
    stopped = entry("stopped", signed, escrows.escrow_datum(deployment, escrow).close)
    journal.save(stopped.model_copy(update={"outcome": Outcome.CANCELLED}))

    await watcher.tick()

    settled = journal.get("stopped")
    assert settled is not None and settled.stage == "settled", settled
    assert balance(devnet, consumer.address) - before == LOCKED - PRICE * SMALL - ALLOWANCE
