"""Results and logs, kept after the job ends (failed jobs included).

A result archive is streamed to disk, hashed while it arrives and refused past its limit, then
stored content-addressed by sha256 under the data dir: the same bytes are stored once, and the
consumer checks them against the hash the provider signed in its receipt.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import tempfile
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path

from sqlmodel import Session, col, func, select

from offchain.market.errors import NotFound, TooLarge
from offchain.market.models import Blob, LogLine

CHUNK = 1 << 16


def blob_path(root: Path, sha256: str) -> Path:
    return root / sha256[:2] / sha256


async def receive_blob(
    root: Path,
    chunks: AsyncIterator[bytes],
    limit: int,
    check: Callable[[str, Path], None] | None = None,
) -> tuple[str, int]:
    """Write `chunks` under `root` by their sha256; TooLarge (nothing kept) past `limit`.
    `check(sha256, file)` sees the whole upload before it is kept: whatever it raises leaves
    nothing behind (a blob already stored under that hash is never touched)."""
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
        final = blob_path(root, sha256)
        final.parent.mkdir(exist_ok=True)
        os.replace(temporary, final)
    finally:
        Path(temporary).unlink(missing_ok=True)
    return sha256, size


def record_blob(session: Session, sha256: str, size: int) -> Blob:
    blob = session.get(Blob, sha256) or Blob(sha256=sha256, size=size)
    session.add(blob)
    return blob


def open_blob(root: Path, session: Session, sha256: str | None) -> tuple[Path, Blob]:
    """The stored file and its record; NotFound when there is none (yet)."""
    blob = session.get(Blob, sha256) if sha256 else None
    if blob is None or not blob_path(root, blob.sha256).exists():
        raise NotFound("no result has been uploaded for this job", "result")
    return blob_path(root, blob.sha256), blob


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
