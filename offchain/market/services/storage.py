"""Results and logs, kept after the job ends (failed jobs included), in the database: any host
of the market serves them.

A result archive is streamed to a file under the data dir, hashed while it arrives and refused
past its limit; once checked it is stored content-addressed by sha256 as `BlobChunk` rows (the
same bytes are stored once), and the consumer checks what it gets against the hash the
provider signed in its receipt. A file is read back a chunk at a time, each in a short session
of its own: a slow download holds no connection. `forget_results` deletes a finished job's
files and logs once `result_retention_ms` has passed since it ended.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path

from sqlalchemy import Engine, delete, or_
from sqlmodel import Session, col, func, select

from offchain.market.errors import NotFound, TooLarge
from offchain.market.models import Blob, BlobChunk, Job, JobState, LogLine

CHUNK = 1 << 16  # read from the request at a time
CHUNK_BYTES = 1 << 20  # one row's bytes
ENDED = (JobState.SETTLED, JobState.REFUNDED, JobState.CANCELLED, JobState.EXPIRED)
log = logging.getLogger("unchained.market")


async def receive_blob(
    engine: Engine,
    root: Path,
    chunks: AsyncIterator[bytes],
    limit: int,
    check: Callable[[str, Path], None] | None = None,
) -> tuple[str, int]:
    """Store `chunks` by their sha256 (staged in a file under `root`); TooLarge (nothing kept)
    past `limit`. `check(sha256, file)` sees the whole upload before it is kept: whatever it
    raises leaves nothing behind (a blob already stored under that hash is never touched)."""
    root.mkdir(parents=True, exist_ok=True)
    digest, size = hashlib.sha256(), 0
    handle, temporary = tempfile.mkstemp(dir=root, prefix=".upload-")
    try:
        with os.fdopen(handle, "wb") as out:
            async for chunk in chunks:
                size += len(chunk)
                if size > limit:
                    raise TooLarge(f"the upload is over its limit of {limit} bytes", "body")
                digest.update(chunk)
                out.write(chunk)
        sha256 = digest.hexdigest()
        if check is not None:
            await asyncio.to_thread(check, sha256, Path(temporary))
        await asyncio.to_thread(store_file, engine, sha256, size, Path(temporary))
    finally:
        Path(temporary).unlink(missing_ok=True)
    return sha256, size


def store_file(engine: Engine, sha256: str, size: int, path: Path) -> None:
    """The file at `path` (whose sha256 is `sha256`) as a blob, in one transaction; nothing
    when its bytes are stored already (they are again after the retention deleted them)."""
    with Session(engine) as session:
        if session.get(BlobChunk, (sha256, 0)) is not None:
            return
        if session.get(Blob, sha256) is None:
            session.add(Blob(sha256=sha256, size=size))
            session.flush()  # the chunks' foreign key
        with path.open("rb") as file:
            seq = 0
            while piece := file.read(CHUNK_BYTES):
                session.add(BlobChunk(sha256=sha256, seq=seq, data=piece))
                seq += 1
        session.commit()


def record_blob(session: Session, sha256: str, size: int) -> Blob:
    blob = session.get(Blob, sha256) or Blob(sha256=sha256, size=size)
    session.add(blob)
    return blob


def open_result(session: Session, job: Job) -> Blob:
    """The job's stored result archive; NotFound saying why when there is none."""
    if job.results_forgotten:
        raise NotFound("this job's result was deleted after its retention", "result")
    blob = session.get(Blob, job.result_sha256) if job.result_sha256 else None
    if blob is None:
        raise NotFound("no result has been uploaded for this job", "result")
    return blob


def blob_chunks(engine: Engine, sha256: str) -> Iterator[bytes]:
    """The blob's bytes, a row at a time, each read in a session of its own."""
    seq = 0
    while True:
        with Session(engine) as session:
            chunk = session.get(BlobChunk, (sha256, seq))
        if chunk is None:
            return
        yield chunk.data
        seq += 1


def blob_bytes(session: Session, sha256: str) -> bytes | None:
    """A small blob whole (a metering record), or None when it is not stored."""
    rows = session.exec(
        select(BlobChunk.data).where(BlobChunk.sha256 == sha256).order_by(col(BlobChunk.seq))
    ).all()
    return b"".join(rows) if rows else None


def import_disk_blobs(engine: Engine, root: Path) -> int:
    """Files a market of an earlier version kept under `root` (`<root>/<ab>/<sha256>`), read
    into the database and removed; how many. A file whose bytes do not hash to its name is
    left where it is, with a warning."""
    moved = 0
    for path in sorted(root.glob("??/" + "[0-9a-f]" * 64)):
        digest = hashlib.sha256()
        with path.open("rb") as file:
            while piece := file.read(CHUNK_BYTES):
                digest.update(piece)
        if digest.hexdigest() != path.name:
            log.warning("stored file %s does not hash to its name: left on disk", path)
            continue
        store_file(engine, path.name, path.stat().st_size, path)
        path.unlink()
        moved += 1
    return moved


def forget_results(engine: Engine, retention_ms: int, now_ms: int) -> int:
    """Delete the files' bytes and the logs of jobs that ended (settled, refunded, cancelled,
    expired) more than `retention_ms` ago, a file only when no job kept longer names it; how
    many jobs. 0 keeps everything."""
    if retention_ms <= 0:
        return 0
    cutoff = now_ms - retention_ms
    with Session(engine) as session:
        old = session.exec(
            select(Job).where(col(Job.state).in_(ENDED), col(Job.updated_at_ms) < cutoff,
                              col(Job.results_forgotten).is_(False))
        ).all()  # fmt: skip
        if not old:
            return 0
        named = {h for job in old for h in (job.result_sha256, job.receipt_evidence_hash) if h}
        ids = [job.id for job in old]
        kept = session.exec(
            select(Job.result_sha256, Job.receipt_evidence_hash).where(
                or_(col(Job.result_sha256).in_(named), col(Job.receipt_evidence_hash).in_(named)),
                col(Job.id).not_in(ids), col(Job.results_forgotten).is_(False),
            )
        ).all()  # fmt: skip
        gone = named - {h for pair in kept for h in pair if h}
        # the blob rows stay (jobs name them); their bytes go
        session.execute(delete(BlobChunk).where(col(BlobChunk.sha256).in_(gone)))
        session.execute(delete(LogLine).where(col(LogLine.job_id).in_(ids)))
        for job in old:
            job.results_forgotten = True
            session.add(job)
        session.commit()
    return len(old)


def append_logs(session: Session, job_id: str, lines: Sequence[str], at_ms: int) -> int:
    """Append `lines` after the job's last line; returns the sequence number of the next one."""
    last = session.exec(select(func.max(LogLine.seq)).where(LogLine.job_id == job_id)).one()
    first = 0 if last is None else last + 1
    session.add_all(
        LogLine(job_id=job_id, seq=first + i, at_ms=at_ms, text=text)
        for i, text in enumerate(lines)
    )
    return first + len(lines)


def logs(
    session: Session, job_id: str, after: int = -1, limit: int = 10_000, tail: bool = False
) -> Sequence[LogLine]:
    """The lines after `after`, oldest first: the first `limit` of them, or the last with
    `tail` (why a job that failed or timed out ended is in its last lines)."""
    query = select(LogLine).where(LogLine.job_id == job_id, col(LogLine.seq) > after)
    order = col(LogLine.seq).desc() if tail else col(LogLine.seq)
    found = session.exec(query.order_by(order).limit(limit)).all()
    return found[::-1] if tail else found
