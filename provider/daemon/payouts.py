"""Payouts the provider collects itself, from its own wallet, in batches: every receipt it
signed whose escrow is still unspent at `close - margin` (close = deadline + settle window,
chain time), so the provider is paid even if the market vanishes; and, without waiting for the
close, every delivered receipt whose payout is below the ledger's minimum UTxO. The market
settles no such receipt (it tops up nothing), while the provider, the submitter, may: its own
change raises its own output (`batch.settle`). These small ones go once `settle_batch_max`
wait or the oldest has waited `small_payout_wait_ms`, so the renter's refund comes back soon
and the fee allowances of several jobs share one fee; at once when one of them is a job its
renter cancelled (it waits at `job cancel` for its money).

A receipt's results stay on disk until its escrow is spent, and that spend is final
(`finality_blocks` deep): the spending transaction says whether it was a settlement
(earnings) or a refund (none): `spends.py`. A fork that undoes the spend before then makes the
escrow open again, to be settled again. The tip seen at each round is kept with the escrow
(`resume.py`): the search for its spend starts near the tip, whatever block a fork orphans."""

from __future__ import annotations

import functools
import logging
import shutil
from pathlib import Path

from offchain.chain.submit import ChainError
from offchain.chain.utxo import parse_out_ref
from offchain.protocol.job.outcome import Outcome
from offchain.protocol.ledger.claim import Claim
from offchain.protocol.tx import batch
from offchain.protocol.tx.escrow import escrow_datum
from offchain.protocol.tx.txbuild import BuildError, out_ref
from provider.config import DaemonSettings
from provider.daemon.apart import apart
from provider.daemon.chain import Chain
from provider.daemon.journal import JobEntry, Journal
from provider.daemon.resume import Block, depth, with_point
from provider.daemon.spends import Spend, find_spend, read_spend

log = logging.getLogger("unchained.provider")


class PayoutWatcher:
    def __init__(
        self, chain: Chain, journal: Journal, results_dir: Path, settings: DaemonSettings
    ) -> None:
        self.chain = chain
        self.journal = journal
        self.results_dir = results_dir
        self.settings = settings
        self.small_since: dict[str, int] = {}  # job id -> when (chain ms) it was first seen

    async def tick(self) -> None:
        """Follow settled escrows until their spend is final (a rolled-back one is open
        again); read how newly spent escrows were spent; settle those falling due."""
        for entry in self.journal.entries():
            if entry.stage in ("settled", "refunded") and entry.spent_in and not entry.final:
                await self._confirm(entry)
        entries = self.journal.entries()
        signed = [e for e in entries if e.receipt and e.stage in ("finished", "delivered")]
        if not signed:
            return
        now = await self.chain.call(self.chain.now_ms)
        at = await self.chain.call(self.chain.tip_point)  # each escrow read after it: unspent there
        paid_at = self.chain.payout  # its offers' payout address
        least = await self.chain.call(batch.payout_minimum, self.chain.context, paid_at)
        due: list[batch.ToSettle] = []
        small: dict[str, batch.ToSettle] = {}
        cancelled = False  # a small payout of a job its renter stopped: settle them now
        for entry in signed:
            assert entry.receipt is not None
            escrow = await self.chain.call(self.chain.utxo, entry.escrow)
            if escrow is None:
                await self._spent(entry)
                continue
            self._unspent_at(entry.job_id, at)
            if entry.close_ms - self.settings.payout_margin_ms <= now < entry.close_ms:
                due.append((escrow, entry.receipt))
            elif entry.stage == "delivered" and 0 < entry.earned < least:
                small[entry.job_id] = (escrow, entry.receipt)
                cancelled |= entry.outcome == Outcome.CANCELLED
        due += self._small_due(small, now, cancelled)
        batch_max = self.settings.settle_batch_max
        for start in range(0, len(due), batch_max):
            await self._settle_apart(due[start : start + batch_max])

    def _unspent_at(self, job_id: str, block: Block) -> None:
        """Add `block` to the resume points of the job's escrow (read again here: the job's
        own task may have moved it on since this round read it)."""
        entry = self.journal.get(job_id)
        if entry is not None:
            points = with_point(entry.resume_points, block)
            self.journal.save(entry.model_copy(update={"resume_points": points}))

    def _small_due(
        self, small: dict[str, batch.ToSettle], now: int, cancelled: bool
    ) -> list[batch.ToSettle]:
        """The small payouts (by job id) to settle now: all of them once `settle_batch_max`
        wait, the oldest has waited `small_payout_wait_ms` since this daemon first saw it, or
        one is a `cancelled` job's."""
        self.small_since = {job: self.small_since.get(job, now) for job in small}
        oldest = min(self.small_since.values(), default=now)
        settings = self.settings
        waiting = now - oldest < settings.small_payout_wait_ms
        if len(small) < settings.settle_batch_max and waiting and not cancelled:
            return []
        return list(small.values())

    async def _settle_apart(self, receipts: list[batch.ToSettle]) -> None:
        """Settle a batch, or when it cannot be, each of its receipts alone: one receipt that
        cannot be settled (logged, tried again next round) never holds up the others."""

        def failed(receipt: batch.ToSettle, exc: Exception) -> None:
            log.error("cannot settle escrow %s: %s", out_ref(receipt[0]), exc)

        await apart(receipts, self._settle, failed, (BuildError, ChainError))

    async def _settle(self, receipts: list[batch.ToSettle]) -> None:
        """Settle `receipts` together: those this daemon's key signed under one claim it signs
        over all of them (the same units again: the settle script checks one signature
        instead of one each), any other by its receipt."""
        wallet, deployment = self.chain.wallet, self.chain.deployment
        network, settle_hash = deployment.network_id, deployment.settle_hash
        own = [(e, r) for e, r in receipts if r.signed_by(wallet.vkey, network, settle_hash)]
        claims: list[batch.ClaimToSettle] = []
        if len(own) > 1:
            units = {escrow.input: receipt.units for escrow, receipt in own}
            claim = Claim.sign(wallet.key, network, settle_hash, units)
            claims = [([escrow for escrow, _ in own], claim)]
            receipts = [pair for pair in receipts if pair not in own]
        settle = functools.partial(
            batch.settle, claims=claims, own_payout=self.chain.payout, busy=self.chain.busy()
        )
        unsigned = await self.chain.call(
            settle, self.chain.context, deployment, receipts, wallet.address
        )
        tx = wallet.sign(unsigned)
        spent = [escrow for escrow, _ in receipts] + [u for utxos, _ in claims for u in utxos]
        refs = [escrow.input for escrow in spent]
        log.info("settling %d receipt(s) the market left unsettled: tx %s fee %d lovelace",
                 len(refs), tx.id, tx.transaction_body.fee)  # fmt: skip
        allowances = sum(escrow_datum(deployment, escrow).fee_allowance for escrow in spent)
        block = await self.chain.submit(tx, "settle", allowances)  # the submitter keeps the rest
        by_escrow = {parse_out_ref(entry.escrow): entry for entry in self.journal.entries()}
        for ref in refs:
            entry = by_escrow[ref]
            self._settled(entry, read_spend(tx, ref, entry.price_per_unit), block)

    async def _spent(self, entry: JobEntry) -> None:
        """The escrow is gone: read how (a settle pays, a refund does not)."""
        try:
            spend, block = await find_spend(
                self.chain.url,
                parse_out_ref(entry.escrow),
                entry.search_from,
                entry.price_per_unit,
            )
        except (LookupError, OSError, TimeoutError) as exc:  # the next round looks again
            log.warning("job %s: escrow %s spent, its transaction not found yet: %s",
                        entry.job_id, entry.escrow, exc)  # fmt: skip
            return
        self._settled(entry, spend, block)

    def _settled(self, entry: JobEntry, spend: Spend, block: Block) -> None:
        """The escrow is spent by a transaction in `block`: nothing is left to collect once
        that block is final (`_confirm`)."""
        self.journal.save(entry.model_copy(update={
            "stage": "settled" if spend.settled else "refunded", "settle_tx": spend.tx_id,
            "settled_lovelace": spend.settled_lovelace, "spent_in": block, "final": False,
        }))  # fmt: skip
        if spend.settled:
            log.info("job %s: escrow %s settled by %s in block %d, %d lovelace earned",
                     entry.job_id, entry.escrow, spend.tx_id, block["height"],
                     spend.settled_lovelace)  # fmt: skip
        else:
            log.warning("job %s: escrow %s spent by %s without a settlement to this provider "
                        "(refunded or cancelled): nothing earned", entry.job_id, entry.escrow,
                        spend.tx_id)  # fmt: skip

    async def _confirm(self, entry: JobEntry) -> None:
        """A spent escrow until its spend is `finality_blocks` deep: then final, and the
        results go. Its block orphaned: the escrow, unspent again, is open again (settled
        again when due, never counted as earned), or its spend is looked for anew."""
        assert entry.spent_in is not None
        deep = await self.chain.call(depth, self.chain.url, entry.spent_in)
        if deep is not None:
            if deep >= self.settings.finality_blocks:
                self.journal.save(entry.model_copy(update={"final": True}))
                shutil.rmtree(self.results_dir / entry.job_id, ignore_errors=True)
                log.info("job %s: %s is final (%d blocks deep)", entry.job_id, entry.settle_tx,
                         deep)  # fmt: skip
            return
        if await self.chain.call(self.chain.utxo, entry.escrow) is None:
            await self._spent(entry)  # spent in another block (or by another transaction)
            return
        self.journal.save(entry.model_copy(update={
            "stage": "delivered" if entry.receipt_sent else "finished", "settle_tx": None,
            "settled_lovelace": None, "spent_in": None,
        }))  # fmt: skip
        log.warning("job %s: %s was rolled back, escrow %s is unspent again", entry.job_id,
                    entry.settle_tx, entry.escrow)  # fmt: skip
