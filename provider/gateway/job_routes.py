"""The gateway's answers about a batch job paid over a channel (`provider.rentals.jobs`): its
signed receipt and its result archive, each asked by a signed control request of the job's
renter (`receipt`, `results`: taken once, so a captured one replayed is refused) and served
once the job ended. The renter checks both as it checks an escrowed job's: the receipt's
signature against the provider key of its channel, the archive's sha256 against the receipt.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio

from offchain.protocol.api.control import ControlRefused
from provider.rentals.book import ENDED, JOB, Rental
from provider.rentals.jobs import JobFiles

CHUNK_BYTES = 256 * 1024
TAR = b"application/x-tar"


def ended_job(files: JobFiles | None, deployment: Rental) -> dict[str, Any]:
    """The receipt record of `deployment`, a job that ended; ControlRefused saying why not."""
    if files is None:
        raise ControlRefused(403, "this gateway serves no job results")
    if deployment.kind != JOB:
        raise ControlRefused(400, f"{deployment.name} is a {deployment.kind}, not a job")
    if deployment.state not in ENDED:
        raise ControlRefused(409, f"job {deployment.name} is {deployment.state}: its receipt "
                             "comes once it ends")  # fmt: skip
    receipt = files.receipt(deployment.name)
    if receipt is None:
        raise ControlRefused(404, f"job {deployment.name} has no receipt: it never ran "
                             f"({deployment.reason or 'no reason kept'}); nothing is owed "
                             "for it")  # fmt: skip
    return receipt


async def send_archive(send: Any, archive: Path | None) -> None:
    """The result archive as the body (none: the run left no /out archive, its hash is of no
    bytes), streamed in chunks."""
    size = 0 if archive is None else archive.stat().st_size
    headers = [(b"content-type", TAR), (b"content-length", str(size).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    if archive is not None:
        async with await anyio.open_file(archive, "rb") as data:
            while chunk := await data.read(CHUNK_BYTES):
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
    await send({"type": "http.response.body", "body": b""})
