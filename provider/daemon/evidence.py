"""The metering record, uploaded to the market once the receipt that commits to it is in: the
market keeps it (only if it hashes to the receipt's evidence hash) so the explorer can chart
what the job used and anyone can check the billed units against it. Best effort: settlement
needs only the receipt, so a record the market does not take is logged and left on disk."""

from __future__ import annotations

import logging
from pathlib import Path

from pydantic import ValidationError

from offchain.protocol.api.market_errors import MarketError
from offchain.protocol.api.market_link import Body, MarketLink
from offchain.protocol.job.metering import MeteringRecord
from provider.daemon.journal import JobEntry
from provider.sandbox.runner import RunResult

log = logging.getLogger("unchained.provider")
CALL_S = 15.0  # best effort: when the market is away the record just stays on disk


def saved_record(results_dir: Path, job_id: str) -> MeteringRecord | None:
    """The record the runner saved with the job's result (None when the run left none)."""
    saved = results_dir / job_id / "result.json"
    try:
        return RunResult.model_validate_json(saved.read_text()).record
    except (OSError, ValidationError):
        return None


async def upload(link: MarketLink, results_dir: Path, entry: JobEntry) -> bool:
    """PUT the record the entry's receipt signed to the market; False when there is none to
    send or the market did not take it."""
    record = saved_record(results_dir, entry.job_id)
    if (
        record is None
        or entry.receipt is None
        or record.digest() != entry.receipt.evidence_hash.hex()
    ):
        log.warning("job %s: no metering record matching its receipt to upload", entry.job_id)
        return False
    body = Body(content=record.canonical_json())
    try:
        await link.send("PUT", f"/jobs/{entry.job_id}/metering", body, retry_for_s=CALL_S)
    except MarketError as exc:
        log.warning("job %s: the market did not take its metering record: %s", entry.job_id, exc)
        return False
    log.info("job %s: metering record uploaded", entry.job_id)
    return True
