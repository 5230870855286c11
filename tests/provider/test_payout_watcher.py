"""The provider's own payout watcher on the session's devnet: a receipt it cannot settle (here
signed by another key) is logged and left, and the good receipt batched with it still settles
(before, the batch's failure ended the round, every round, for every receipt after it)."""

from __future__ import annotations

from pycardano import PaymentSigningKey, UTxO

from offchain.protocol import escrow as escrows
from offchain.protocol.jobspec import JobSpec
from offchain.protocol.txbuild import out_ref
from provider.daemon.chain import Chain
from provider.daemon.journal import JobEntry, Journal, SignedReceiptRecord
from provider.daemon.payouts import PayoutWatcher
from tests.market.test_lifecycle import SPEC
from tests.protocol.onchain import EVIDENCE, PRICE, RESULT, lock, wallet
from tests.provider.chain import deployed

UNITS = 1_000  # 2 ADA at PRICE: above the min-UTxO


def entry(name: str, escrow: UTxO, receipt: escrows.SignedReceipt, close_ms: int) -> JobEntry:
    """A job the daemon delivered, its signed receipt waiting to be collected."""
    signed = SignedReceiptRecord(
        units=receipt.units, result_hash=receipt.result_hash.hex(),
        evidence_hash=receipt.evidence_hash.hex(), signature=receipt.signature.hex(),
    )  # fmt: skip
    return JobEntry(
        job_id=name, escrow=out_ref(escrow), spec=JobSpec.model_validate(SPEC),
        price_per_unit=PRICE, gpu_uuids=[], slot=0, close_ms=close_ms, stage="delivered",
        accepted_at_ms=0, receipt=signed,
    )  # fmt: skip


async def test_a_receipt_that_cannot_settle_does_not_hold_up_the_one_beside_it(devnet, tmp_path):
    deployment = await deployed(devnet, tmp_path / "deployment.json")
    consumer, provider = await wallet(devnet), await wallet(devnet)
    stranger = PaymentSigningKey.generate()
    journal = Journal(tmp_path / "state")
    for name, key in (("a-signed-by-a-stranger", stranger), ("b-good", provider.key)):
        escrow = await lock(devnet, deployment, consumer, provider)
        receipt = escrows.signed_receipt(deployment, key, escrow, UNITS, RESULT, EVIDENCE)
        close = escrows.escrow_datum(deployment, escrow).close
        journal.save(entry(name, escrow, receipt, close))
    chain = Chain(devnet.url, devnet.context(), deployment, provider)
    watcher = PayoutWatcher(chain, journal, tmp_path / "results", 10**12, batch_max=2)

    await watcher.tick()

    bad, good = journal.get("a-signed-by-a-stranger"), journal.get("b-good")
    assert bad is not None and bad.stage == "delivered" and bad.settle_tx is None
    assert good is not None and good.stage == "settled"
    assert good.settled_lovelace == PRICE * UNITS
