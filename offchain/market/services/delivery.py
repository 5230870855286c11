"""The provider's side of a job: accept it, run it, log, upload the result, hand in the
signed receipt (or report the failure), then upload the metering record the receipt commits
to. Signatures that reach the chain are checked here with `offchain.protocol.ledger.payloads`, the
same bytes the validators check, before anything is stored.

The metering record is taken only after the receipt: its evidence hash, which the provider
signed, is what the upload must hash to, so a record is never stored on the provider's word
alone and never waits for a receipt that may not come.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError
from sqlmodel import Session

from offchain.market import schemas
from offchain.market.errors import Busy, Conflict, Forbidden, Invalid
from offchain.market.models import Cause, Job, JobState
from offchain.market.services import jobs, storage
from offchain.protocol.job.metering import MeteringRecord
from offchain.protocol.job.outcome import describe
from offchain.protocol.job.receipt import EMPTY_HASH, Receipt
from offchain.protocol.ledger.payloads import acceptance_payload, verify
from offchain.protocol.tx.deployment import Deployment

S = JobState
EVIDENCE_LIMIT_BYTES = 64 << 20  # a day of one-second samples with GPUs is well under this


def own_job(session: Session, provider_id: str, job_id: str) -> Job:
    """The job, if `provider_id` is the provider it was quoted to; Forbidden otherwise."""
    job = jobs.get(session, job_id)
    if job.provider_id != provider_id:
        raise Forbidden(f"job {job_id} is assigned to another provider", "job_id")
    return job


def accept(
    session: Session, deployment: Deployment, job: Job, signature: str, escrow: str | None = None
) -> Job:
    """Store the provider's Acceptance (it backs the job with its bond) once it verifies.
    `escrow`: the one it names, when the provider Started the job's escrow; Busy (try again)
    until the chain follower has followed that Start."""
    jobs.expect(job, S.FUNDED)
    if escrow is not None and escrow != job.escrow_ref:
        raise Busy(
            f"escrow {escrow} is not job {job.id}'s ({job.escrow_ref}) yet: the market's chain "
            "follower has not reached its Start; try again"
        )
    payload = acceptance_payload(
        deployment.network_id, deployment.escrow_hash, job.escrow,
        bytes.fromhex(job.spec_digest), deployment.bond_hash,
    )  # fmt: skip
    if not verify(job.provider_key, payload, bytes.fromhex(signature)):
        raise Invalid("not the provider's signature of this escrow's Acceptance", "signature")
    job.acceptance_signature = signature
    jobs.transition(session, job, S.ACCEPTED, Cause.API, "acceptance verified")
    session.commit()
    return job


def start(session: Session, job: Job) -> Job:
    jobs.transition(session, job, S.RUNNING, Cause.API, "container started")
    session.commit()
    return job


def log(session: Session, job: Job, lines: list[str]) -> int:
    """Append log lines while the job runs; returns the next line's sequence number."""
    jobs.expect(job, S.ACCEPTED, S.RUNNING)
    next_seq = storage.append_logs(session, job.id, lines, jobs.now_ms())
    session.commit()
    return next_seq


def attach_result(session: Session, job: Job, sha256: str, size: int) -> Job:
    """Record the uploaded archive (already stored by its hash) as the job's result."""
    jobs.expect(job, S.RUNNING)
    storage.record_blob(session, sha256, size)
    job.result_sha256 = sha256
    session.add(job)
    session.commit()
    return job


def hand_in_receipt(
    session: Session, deployment: Deployment, job: Job, receipt: schemas.ReceiptBody
) -> Job:
    """Store the signed receipt once it verifies against the escrow and the provider's key;
    the job is completed and waits for settlement whatever its outcome (a failed or timed-out
    run is billed for what it used), which is kept beside it with its exit code."""
    jobs.expect(job, S.RUNNING)
    assert job.max_units is not None  # a running job is quoted
    if receipt.units > job.max_units:
        raise Invalid(f"{receipt.units} units is more than the quoted {job.max_units}", "units")
    if job.result_sha256 is not None and receipt.result_hash != job.result_sha256:
        raise Invalid("not the sha256 of the uploaded result", "result_hash")
    _keep_receipt(deployment, job, receipt)
    job.outcome, job.exit_code = receipt.outcome, receipt.exit_code
    ended = describe(receipt.outcome, receipt.exit_code)
    detail = f"receipt for {receipt.units} units" + (f": {ended}" if ended else "")
    jobs.transition(session, job, S.COMPLETED, Cause.API, detail)
    session.commit()
    return job


def _keep_receipt(
    deployment: Deployment, job: Job, receipt: schemas.ReceiptBody, field: str = ""
) -> None:
    """Put the receipt on the job once it verifies against the escrow and the provider's key
    (Invalid naming `field` + signature otherwise), as the validators will check it."""
    signed = Receipt.from_body(job.escrow, receipt.model_dump())
    vkey = job.provider_key
    if not signed.signed_by(vkey, deployment.network_id, deployment.settle_hash):
        raise Invalid(
            "not the provider's signature of this receipt for the escrow", f"{field}signature"
        )
    job.keep_receipt(signed)


def expect_receipt(job: Job) -> str:
    """The evidence hash the job's signed receipt names; Conflict before there is one."""
    if job.receipt_evidence_hash is None:
        raise Conflict(f"job {job.id} has no receipt yet: its metering record comes after", "state")
    return job.receipt_evidence_hash


def check_evidence(job: Job, sha256: str, upload: Path) -> None:
    """Invalid unless the upload is the metering record the receipt signed: the canonical JSON
    of a record whose digest is the receipt's evidence hash."""
    expected = expect_receipt(job)
    if sha256 != expected:
        raise Invalid(f"sha256 {sha256} is not the receipt's evidence hash {expected}", "body")
    try:
        record = MeteringRecord.model_validate_json(upload.read_bytes())
    except ValidationError as exc:
        raise Invalid(f"not a metering record: {exc.error_count()} errors", "body") from exc
    if record.digest() != sha256:
        raise Invalid("not the record's canonical JSON (sorted keys, no spaces, ASCII)", "body")
    if record.job_id != job.id:
        raise Invalid(f"the record is for job {record.job_id}, not {job.id}", "body")


def attach_evidence(session: Session, sha256: str, size: int) -> None:
    """Record the stored metering record; the explorer finds it by the receipt's hash."""
    storage.record_blob(session, sha256, size)
    session.commit()


def fail(session: Session, deployment: Deployment, job: Job, failure: schemas.FailureBody) -> Job:
    """The job could not run to its end; its logs and reason are kept for the consumer. With
    a zero-unit receipt (a refused job, or one that failed before it ran: nothing to bill),
    verified as a receipt is, the next settle batch returns the renter's money at once."""
    if failure.receipt is None:
        jobs.transition(session, job, S.FAILED, Cause.API, failure.reason)
    elif job.state == S.FAILED:  # the deadline watch failed it first: the receipt still counts
        _keep_zero_receipt(deployment, job, failure.receipt)
        jobs.note(session, job, Cause.API, f"zero-unit receipt: {failure.reason}")
    else:
        _keep_zero_receipt(deployment, job, failure.receipt)
        jobs.transition(session, job, S.FAILED, Cause.API, failure.reason)
    job.exit_code, job.failure_reason = failure.exit_code, failure.reason
    session.commit()
    return job


def _keep_zero_receipt(deployment: Deployment, job: Job, receipt: schemas.ReceiptBody) -> None:
    """A failure's receipt bills nothing and commits to nothing (PROTOCOL.md): units 0, result
    and evidence hashes the sha256 of nothing; then it is kept as any receipt."""
    if receipt.units != 0:
        raise Invalid(f"a failure's receipt bills 0 units, not {receipt.units}", "receipt.units")
    for name in ("result_hash", "evidence_hash"):
        if getattr(receipt, name) != EMPTY_HASH.hex():
            raise Invalid(
                f"a failure's receipt names no {name[:-5]}: {EMPTY_HASH.hex()}, the sha256 "
                "of nothing", f"receipt.{name}",
            )  # fmt: skip
    jobs.expect(job, S.FUNDED, S.ACCEPTED, S.RUNNING, S.FAILED)
    if job.receipt_signature is not None:
        raise Conflict(f"job {job.id} has a receipt already", "receipt")
    _keep_receipt(deployment, job, receipt, "receipt.")
