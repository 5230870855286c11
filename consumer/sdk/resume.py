"""`job submit --resume JOB`: an earlier job's last checkpoint handed to a new job as its input.

The earlier job must be the renter's own (recorded in its state directory: the escrow it
locked) with a signed receipt; its result archive is downloaded and verified against that
receipt like `job results`, and `checkpoint.pt` at the top of its /out becomes the new job's
`/in/checkpoint.pt`. The file travels inside the spec as a `data:` URL with its sha256, so no
server of the renter's has to be reachable from the provider and the job's id names the very
checkpoint it starts from. Everything here happens before a quote is asked: a refusal moves
no money."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

from consumer.sdk.errors import ConsumerError
from consumer.sdk.session import Consumer
from offchain.protocol.job.jobspec import JobSpec

CHECKPOINT = "checkpoint.pt"  # in the earlier job's /out, and in the new job's /in
# the spec carries it base64-encoded, and the market takes requests of up to 1 MiB
MAX_CHECKPOINT_BYTES = 512 << 10


async def resumed_spec(consumer: Consumer, job_id: str, spec: JobSpec, into: Path) -> JobSpec:
    """`spec` with job `job_id`'s last checkpoint as its input `checkpoint.pt` (one of that
    path already in `spec` is replaced); the earlier job's verified results are kept in `into`.
    ConsumerError, before anything is paid, when the job is not the renter's, has no
    results yet, or its results hold no checkpoint."""
    try:
        consumer.store.get(job_id)
    except ConsumerError as exc:
        raise ConsumerError(
            f"--resume {job_id}: not a job of yours recorded here ({exc}); nothing was "
            "submitted", job=job_id,
        ) from exc  # fmt: skip
    result = await consumer.results(job_id, into, unpack=True)
    checkpoint = (result.unpacked or into) / CHECKPOINT
    if result.unpacked is None or not checkpoint.is_file():
        raise ConsumerError(
            f"--resume {job_id}: its results (in {into}) hold no {CHECKPOINT} at the top of "
            "/out, so there is nothing to resume from; nothing was submitted", job=job_id,
        )  # fmt: skip
    data = checkpoint.read_bytes()
    if len(data) > MAX_CHECKPOINT_BYTES:
        raise ConsumerError(
            f"--resume {job_id}: its {CHECKPOINT} is {len(data)} bytes, over the "
            f"{MAX_CHECKPOINT_BYTES} a spec can carry; host it and name it in the spec's "
            "inputs (url and sha256) instead; nothing was submitted", job=job_id,
        )  # fmt: skip
    given = {
        "path": CHECKPOINT,
        "url": "data:application/octet-stream;base64," + base64.b64encode(data).decode(),
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    fields = spec.model_dump(mode="json")
    fields["inputs"] = [i for i in fields["inputs"] if i["path"] != CHECKPOINT] + [given]
    return JobSpec.model_validate(fields)
