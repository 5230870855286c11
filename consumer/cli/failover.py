"""`unchained job submit --failover N`: the job locked with a start deadline and watched until
it ends; when its provider does not start it by then, fails for its own reasons or goes silent
while running, it is refunded (or came back by its receipt's settle) and locked again with
another provider, up to N times (`consumer.sdk.failover`); then the usual progress. With
`--detach` it is watched only until its Start."""

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
    detach: bool,
) -> str:
    """Each step told as it happens (not with --json) and each attempt shown at the end; the
    market's job id of the provider that ran it (started it, with `detach`)."""
    from consumer.sdk.failover import submit_with_failover

    if not yes:
        if as_json:
            raise ConsumerError("--json needs --yes: there is no one to ask")
        asked = (f"lock this job, and again up to {failover} time(s) from the money that "
                 f"comes back when a provider does not start it within {start_within_s} s"
                 f"{'' if detach else ' or fails it'}?")  # fmt: skip
        if not typer.confirm(asked):
            raise ConsumerError("nothing locked")
    tell = (lambda _: None) if as_json else (lambda line: typer.echo(line, err=True))
    attempts = await submit_with_failover(
        consumer, spec, failover, start_within_s, gpu_model, min_delivered, not detach, tell
    )
    shown: list[dict[str, Any]] = [a.__dict__ for a in attempts]
    lines = [f"{a.provider_id}: {a.outcome}{f' ({a.detail})' if a.detail else ''} (job "
             f"{a.job_id}{f', refund {a.refund_tx}' if a.refund_tx else ''})"
             for a in attempts]  # fmt: skip
    emit(as_json, {"attempts": shown, "job_id": attempts[-1].job_id}, "\n".join(lines))
    return attempts[-1].job_id
