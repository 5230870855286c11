"""`unchained job submit --failover N`: the job locked with a start deadline and, when its
provider does not start it by then, refunded early and locked again with another provider, up
to N times (`consumer.sdk.failover`); then the usual progress."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

from consumer.cli.main import emit
from consumer.sdk.errors import ConsumerError

if TYPE_CHECKING:
    from consumer.sdk.session import Consumer
    from offchain.protocol.job.jobspec import JobSpec


async def submit_failover(
    consumer: Consumer,
    spec: JobSpec,
    gpu_model: str | None,
    failover: int,
    start_within_s: int,
    min_delivered: int | None,
    yes: bool,
    as_json: bool,
) -> str:
    """Each attempt shown as it ends; the market's job id of the provider that started it."""
    from consumer.sdk.failover import submit_with_failover

    if not yes:
        if as_json:
            raise ConsumerError("--json needs --yes: there is no one to ask")
        asked = (f"lock this job, and again up to {failover} time(s) from the refund when a "
                 f"provider does not start it within {start_within_s} s?")  # fmt: skip
        if not typer.confirm(asked):
            raise ConsumerError("nothing locked")
    attempts = await submit_with_failover(
        consumer, spec, failover, start_within_s, gpu_model, min_delivered
    )
    shown: list[dict[str, Any]] = [a.__dict__ for a in attempts]
    lines = [f"{a.provider_id}: {a.outcome} (job {a.job_id})" for a in attempts]
    emit(as_json, {"attempts": shown, "job_id": attempts[-1].job_id}, "\n".join(lines))
    return attempts[-1].job_id
