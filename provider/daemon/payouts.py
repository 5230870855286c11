"""Payouts the provider collects itself: every receipt it signed whose escrow is still unspent
at `close - margin` (close = deadline + settle window, chain time) is settled from the
provider's own wallet, in batches. So the provider is paid even if the market vanishes.
A receipt's results stay on disk until its escrow is spent; then the spending transaction says
whether it was a settlement (earnings) or a refund (none): `spends.py`."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

from offchain.chain.submit import ChainError, submit_confirmed
from offchain.chain.utxo import parse_out_ref
from offchain.protocol import escrow as escrows
from offchain.protocol.txbuild import BuildError, out_ref
from provider.daemon.chain import Chain
from provider.daemon.journal import JobEntry, Journal
from provider.daemon.spends import Spend, find_spend, read_spend

log = logging.getLogger("unchained.provider")


class PayoutWatcher:
    def __init__(
        self, chain: Chain, journal: Journal, results_dir: Path, margin_ms: int, batch_max: int
    ) -> None:
        self.chain = chain
        self.journal = journal
        self.results_dir = results_dir
        self.margin_ms = margin_ms
        self.batch_max = batch_max

    async def tick(self) -> None:
        """Read how spent escrows were spent (and drop their results); settle those falling due."""
        entries = self.journal.entries()
        signed = [e for e in entries if e.receipt and e.stage in ("finished", "delivered")]
        if not signed:
            return
        now = await self.chain.call(self.chain.now_ms)
        due: list[escrows.ToSettle] = []
        for entry in signed:
            escrow = await self.chain.call(self.chain.utxo, entry.escrow)
            if escrow is None:
                await self._spent(entry)
            elif entry.close_ms - self.margin_ms <= now < entry.close_ms:
                assert entry.receipt is not None
                due.append((escrow, entry.receipt))
        for start in range(0, len(due), self.batch_max):
            await self._settle_apart(due[start : start + self.batch_max])

    async def _settle_apart(self, receipts: list[escrows.ToSettle]) -> None:
        """Settle a batch, or when it cannot be, each of its receipts alone: one receipt that
        cannot be settled (logged, tried again next round) never holds up the others."""
        try:
            await self._settle(receipts)
        except (BuildError, ChainError) as exc:
            if len(receipts) == 1:
                log.error("cannot settle escrow %s: %s", out_ref(receipts[0][0]), exc)
                return
            log.warning("a batch of %d cannot be settled (%s): each alone", len(receipts), exc)
            for receipt in receipts:
                await self._settle_apart([receipt])

    async def _settle(self, receipts: list[escrows.ToSettle]) -> None:
        wallet = self.chain.wallet
        unsigned = await self.chain.call(
            escrows.settle, self.chain.context, self.chain.deployment, receipts, wallet.address
        )
        tx = wallet.sign(unsigned)
        refs = [escrow.input for escrow, _ in receipts]
        log.info("settling %d receipt(s) the market left unsettled: tx %s fee %d lovelace",
                 len(receipts), tx.id, tx.transaction_body.fee)  # fmt: skip
        await submit_confirmed(self.chain.url, tx)
        by_escrow = {parse_out_ref(entry.escrow): entry for entry in self.journal.entries()}
        for ref in refs:
            self._settled(by_escrow[ref], read_spend(tx, ref, wallet.address))

    async def _spent(self, entry: JobEntry) -> None:
        """The escrow is gone: read how (a settle pays, a refund does not)."""
        try:
            spend = await find_spend(
                self.chain.url,
                parse_out_ref(entry.escrow),
                entry.unspent_at,
                self.chain.wallet.address,
            )
        except (LookupError, OSError, TimeoutError) as exc:  # the next round looks again
            log.warning("job %s: escrow %s spent, its transaction not found yet: %s",
                        entry.job_id, entry.escrow, exc)  # fmt: skip
            return
        self._settled(entry, spend)

    def _settled(self, entry: JobEntry, spend: Spend) -> None:
        """The escrow is spent: nothing is left to collect, the results may go."""
        self.journal.save(entry.model_copy(update={
            "stage": "settled" if spend.settled else "refunded", "settle_tx": spend.tx_id,
            "settled_lovelace": spend.settled_lovelace,
        }))  # fmt: skip
        shutil.rmtree(self.results_dir / entry.job_id, ignore_errors=True)
        if spend.settled:
            log.info("job %s: escrow %s settled by %s, %d lovelace earned", entry.job_id,
                     entry.escrow, spend.tx_id, spend.settled_lovelace)  # fmt: skip
        else:
            log.warning("job %s: escrow %s spent by %s without a settlement to this provider "
                        "(refunded or cancelled): nothing earned", entry.job_id, entry.escrow,
                        spend.tx_id)  # fmt: skip
