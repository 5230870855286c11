"""The consumer's own record of its jobs (`consumer.sdk.job_record.JobRecord`), one JSON file each
under the state directory, read only when there is one."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from consumer.sdk.errors import ConsumerError

MIN_PREFIX = 8  # characters of a job id before a prefix names a job (as the market asks)

if TYPE_CHECKING:  # imported where a record is read: an empty store needs no pydantic
    from consumer.sdk.job_record import JobRecord


def write_whole(path: Path, text: str) -> None:
    """Write `text` to `path` through a rename: a crash leaves the old file or the new one,
    never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".part")
    partial.write_text(text)
    os.replace(partial, path)


def local_time(posix_ms: int) -> str:
    """A POSIX ms instant on this machine's clock and zone, to the second."""
    return datetime.fromtimestamp(posix_ms // 1000, UTC).astimezone().isoformat(timespec="seconds")


class JobStore:
    """`<state_dir>/jobs/<job_id>.json`, each written whole (rename), so a crash never leaves
    half a record."""

    def __init__(self, state_dir: Path) -> None:
        self.dir = state_dir / "jobs"

    def save(self, record: JobRecord) -> None:
        write_whole(self.dir / f"{record.job_id}.json", record.model_dump_json(indent=2) + "\n")

    def forget(self, job_id: str) -> None:
        """Drop a quote never locked (a job that ran over a channel instead): nothing of it is
        owed, so it is no job of this renter's spend."""
        (self.dir / f"{job_id}.json").unlink(missing_ok=True)

    def get(self, job_id: str) -> JobRecord:
        path = self.dir / f"{job_id}.json"
        if not path.exists():
            raise ConsumerError(
                f"no job {job_id} in {self.dir}: see `unchained job list` (or pass the "
                "--state-dir it was submitted with)",
                job=job_id,
            )
        return read(path)

    def resolve(self, given: str) -> str:
        """The full id of the job `given` names here: its id, a unique prefix of it, or its
        escrow ref (TXID#IX). A job not recorded here is left as given, for the market to
        resolve; a prefix several jobs here share is refused, listing them."""
        if (self.dir / f"{given}.json").exists() or not self.dir.is_dir():
            return given
        if len(given) < MIN_PREFIX and "#" not in given:
            return given  # too short to name a job here: the market answers for it
        matches = [record.job_id for record in self.all()
                   if record.job_id.startswith(given) or record.escrow == given]  # fmt: skip
        if len(matches) > 1:
            raise ConsumerError(
                f"{given!r} names {len(matches)} jobs here: {', '.join(matches)}; give more of "
                "the id", job=given, matches=matches,
            )  # fmt: skip
        return matches[0] if matches else given

    def all(self) -> list[JobRecord]:
        """Every job, oldest first."""
        records = [read(path) for path in self.dir.glob("*.json")]
        return sorted(records, key=lambda record: record.created_ms)


def read(path: Path) -> JobRecord:
    """The record in `path`, or ConsumerError naming the file when it is not one (edited or
    damaged): a bad file is named, never a traceback."""
    from pydantic import ValidationError

    from consumer.sdk.job_record import JobRecord

    try:
        return JobRecord.model_validate_json(path.read_bytes())
    except ValidationError as exc:  # invalid JSON and bytes that are not UTF-8 too
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the file"
        raise ConsumerError(
            f"{path} is not a job record ({where}: {first['msg']}): move it out of the state "
            "directory or restore it",
            path=str(path),
        ) from exc
