"""A job's input files: fetched by the provider before the job starts, checked against their
sha256, and mounted read-only at /in. A wrong hash fails the job before any time is billed."""

from __future__ import annotations

import hashlib
import urllib.request
from pathlib import Path

from offchain.protocol.errors import UnchainedError
from offchain.protocol.jobspec import InputFile

CHUNK = 1 << 20
FETCH_TIMEOUT_S = 30


class InputError(UnchainedError, RuntimeError):
    """An input could not be fetched, was too large, or had another hash than the spec says."""


def stage_inputs(inputs: list[InputFile], directory: Path, max_bytes: int) -> None:
    """Fetch every input into `directory`; together they may hold at most `max_bytes`."""
    budget = max_bytes
    for item in inputs:
        target = directory / item.path
        target.parent.mkdir(parents=True, exist_ok=True)
        digest = hashlib.sha256()
        try:
            with (
                urllib.request.urlopen(item.url, timeout=FETCH_TIMEOUT_S) as source,
                open(target, "wb") as sink,
            ):
                while chunk := source.read(CHUNK):
                    budget -= len(chunk)
                    if budget < 0:
                        raise InputError(f"inputs exceed the job's {max_bytes} bytes of disk")
                    digest.update(chunk)
                    sink.write(chunk)
        except OSError as exc:  # URLError and socket errors are OSErrors
            raise InputError(f"input {item.path}: cannot fetch: {exc}") from exc
        if digest.hexdigest() != item.sha256:
            raise InputError(
                f"input {item.path}: sha256 is {digest.hexdigest()}, the spec says {item.sha256}"
            )
        target.chmod(0o444)
