"""The daemon's answer to a renter's cancel, handed to it with its assignments. A job it has
not taken (nothing in its journal) costs it nothing to give up: it checks the Cancel itself
(`check_cancel`: this escrow, by Cancel, nothing of the provider's, nothing else), signs its
witness, records the job as cancelled and never takes it. A job it took is stopped instead:
the runner kills its container and the run ends as usual, metered, its receipt billing the
units it used (the market settles it; no Cancel then, the receipt pays for the work done)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from cbor2 import CBORError
from pycardano import Transaction
from pycardano.exception import PyCardanoException

from offchain.chain.utxo import utxo_at
from offchain.protocol.api.market_errors import MarketError
from offchain.protocol.api.market_link import Body
from offchain.protocol.api.wire import Assignment
from offchain.protocol.checks.cancel_check import CancelRefused, check_cancel
from offchain.protocol.job.jobspec import JobSpec
from offchain.protocol.tx.escrow import escrow_datum
from offchain.protocol.tx.txbuild import BuildError, out_ref
from provider.daemon.chain import CHAIN_DOWN, ChainUnavailable
from provider.daemon.jobs import CALL_S, Worker
from provider.daemon.journal import JobEntry

log = logging.getLogger("unchained.provider")
# what a bad transaction, escrow or assignment raises (pycardano and cbor2 several kinds)
NOT_A_CANCEL = (
    CancelRefused,
    BuildError,
    PyCardanoException,
    CBORError,
    ValueError,
    KeyError,
    TypeError,
)


async def answer_cancel(worker: Worker, assignment: Assignment) -> None:
    """Sign the cancel of a job not taken, or stop a taken one, and tell the market.
    ChainUnavailable: the Cancel cannot be checked now; the market hands it again."""
    job_id = assignment.job_id
    entry = worker.journal.get(job_id)
    if job_id in worker.seen or (entry is not None and entry.stage != "cancelled"):
        await asyncio.to_thread(worker.runner.stop, job_id)
        log.info("job %s: stopped at its renter's request; its receipt bills the units it ran",
                 job_id)  # fmt: skip
        answer: dict[str, Any] = {"action": "stopping"}
    else:
        answer = await _sign(worker, job_id, assignment)
    try:
        await worker.link.send(
            "POST", f"/jobs/{job_id}/cancel/answer", Body.of_json(answer), retry_for_s=CALL_S
        )
    except MarketError as exc:  # the market hands the cancel again
        log.warning("job %s: the market did not take the answer to its cancel: %s", job_id, exc)


async def _sign(worker: Worker, job_id: str, assignment: Assignment) -> dict[str, Any]:
    """The provider's witness of the renter's Cancel once checked, the job journaled as
    cancelled; a refusal saying why when the transaction is not a cancel of this escrow only."""
    try:
        tx = Transaction.from_cbor(bytes.fromhex(str(assignment.cancel_tx)))
        spec = JobSpec.model_validate(assignment.spec)
        entry = await worker.chain.call(_checked, worker, job_id, tx, assignment, spec)
    except CHAIN_DOWN as exc:
        raise ChainUnavailable(f"job {job_id}: its cancel to check again: {exc!r}") from exc
    except NOT_A_CANCEL as exc:
        log.warning("job %s: cancel refused: %r", job_id, exc)
        return {"action": "refused", "reason": (str(exc) or repr(exc))[:4096]}
    worker.journal.save(entry)
    log.info("job %s: cancel of escrow %s signed (transaction %s); the job is given up",
             job_id, entry.escrow, tx.id)  # fmt: skip
    return {"action": "signed", "signature": worker.key.sign(tx.id.payload).hex()}


def _checked(
    worker: Worker, job_id: str, tx: Transaction, assignment: Assignment, spec: JobSpec
) -> JobEntry:
    """The journal entry of the cancelled job, once the Cancel checks against the chain."""
    chain = worker.chain
    escrow_ref = chain.utxo(assignment.escrow)
    if escrow_ref is None:
        raise CancelRefused(f"escrow {assignment.escrow} is not unspent on chain")
    provider = worker.key.to_verification_key().hash()
    escrow = check_cancel(
        tx, chain.deployment, escrow_ref.input, provider, lambda ref: utxo_at(chain.context, ref)
    )
    return JobEntry(
        job_id=job_id, escrow=out_ref(escrow), spec=spec,
        price_per_unit=assignment.price_per_unit, gpu_uuids=[], slot=-1,
        close_ms=escrow_datum(chain.deployment, escrow).close, stage="cancelled",
        accepted_at_ms=chain.now_ms(), reason=f"cancelled by its renter: signed Cancel {tx.id}",
    )  # fmt: skip
