"""`job submit` over a payment channel: which path a quoted job takes, and the channel path.

After the market's quote (`job submit` quotes as before), the job runs over a channel when this
renter has an open channel to the quoted provider (its own records, checked on chain) whose
provider has a gateway, with room left for the job's most cost at the provider's price per
second, and no pod agent signing on it now (one signer per channel). Otherwise, or with
`--escrow`, it takes the escrow path, and the screen says why.

Over a channel: the job is deployed on the provider's gateway (`consumer.sdk.channel_jobs`),
then paid while it runs (`consumer.sdk.channel_jobs.JobPayer`: the exact due, never above
this renter's count of seconds), in this process, which holds the channel's agent lock
throughout (one signer per channel); once it ended the last due is paid (its billing frozen at the
receipt's whole seconds) and its receipt and results are fetched and verified. A due above the
renter's count is not signed: the job is stopped (the provider stops it anyway when the IOUs
lag), and the renter owes at most the provider's credit."""

from __future__ import annotations

import dataclasses
import secrets
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from consumer.sdk.errors import ConsumerError
from offchain.protocol.ledger.amounts import ada

if TYPE_CHECKING:
    from consumer.sdk.channel_store import ChannelRecord
    from consumer.sdk.channels import Channels, ChannelStatus
    from consumer.sdk.quote import CheckedQuote
    from consumer.sdk.session import VerifiedResult
    from offchain.protocol.job.channel_job import ChannelJobSpec
    from offchain.protocol.job.jobspec import JobSpec

ROUND_S = 0.5  # how often the due is paid while the job runs
ENDED = ("stopped", "failed")


@dataclasses.dataclass(frozen=True)
class ChannelRoute:
    """The channel a quoted job runs over, and at what price."""

    record: ChannelRecord
    status: ChannelStatus
    gateway_url: str
    spec: ChannelJobSpec


def route(
    channels: Channels, quote: CheckedQuote, spec: JobSpec, state_dir: Path
) -> ChannelRoute | str:
    """The channel `spec` (as quoted) runs over, or why it takes the escrow path."""
    from consumer.cli.pod_agent import running
    from consumer.sdk.channel_jobs import ChannelJobRefused, channel_job, room_refusal

    provider = quote.provider_id[:16]
    gateway_url = quote.terms.get("gateway_url")
    if not gateway_url:
        return f"provider {provider} has no gateway: channels pay through it"
    try:
        wanted = channel_job(spec, int(quote.terms["price_per_unit"]))
    except ChannelJobRefused as exc:
        return f"its spec does not allow the provider's price over a channel: {exc}"
    mine = [r for r in channels.store.all()
            if r.provider_id == quote.provider_id and not r.closed_tx_id]  # fmt: skip
    if not mine:
        return (f"no open channel to provider {provider} (open one: `unchained channel open "
                f"--provider {quote.provider_id} --deposit ADA`)")  # fmt: skip
    reasons = []
    for record in mine:
        try:
            status = channels.status(record.channel_id)
        except ConsumerError as exc:
            reasons.append(f"channel {record.channel_id[:16]}: {exc}")
            continue
        why = room_refusal(wanted, status.left, record.channel_id)
        if status.state != "open":
            why = f"channel {record.channel_id[:16]} is {status.state}"
        elif why is None and running(state_dir, record.channel_id):
            why = f"a pod agent signs on channel {record.channel_id[:16]} now"
        if why is None:
            return ChannelRoute(record, status, str(gateway_url), wanted)
        reasons.append(why)
    return "; ".join(reasons)


def run_over_channel(
    channels: Channels, chosen: ChannelRoute, state_dir: Path, out: Path | None,
    say: Any,
) -> tuple[dict[str, Any], VerifiedResult]:  # fmt: skip
    """Deploy the job on the chosen channel, pay it while it runs, fetch and verify what it
    left; its final status and the verified result. `say(line)` shows progress."""
    from consumer.cli.pod_agent import holding
    from consumer.sdk.channel_jobs import JobPayer, deploy_job, job_results
    from consumer.sdk.endpoint_client import EndpointRefused, GatewayControl
    from consumer.sdk.iou_signer import IouNotSigned
    from consumer.sdk.rental_store import RentalStore

    record, status = chosen.record, chosen.status
    channel_id = record.channel_id
    name = f"job_{secrets.token_hex(6)}"
    store = RentalStore(state_dir)
    with (
        holding(state_dir, channel_id) as held,
        GatewayControl(chosen.gateway_url, channels.key, channels.deployment.network_id) as control,
    ):
        if not held:
            raise ConsumerError(f"a pod agent signs on channel {channel_id[:16]} now: try "
                                "again, or --escrow", channel_id=channel_id)  # fmt: skip
        admission = (status.utxo, record.terms_cbor) if status.utxo else None
        job = deploy_job(control, store, name, chosen.spec, record, status.left,
                         chosen.gateway_url, admission)  # fmt: skip
        say(f"job {name} deployed on {chosen.gateway_url}, paid on channel {channel_id[:16]} at "
            f"{chosen.spec.price_per_second:,} lovelace per second")  # fmt: skip
        payer = JobPayer(control, channels.signer(channel_id), job)
        seen = ""
        while True:
            try:
                final = payer.round()
            except (EndpointRefused, IouNotSigned) as exc:
                control.stop(name, bytes.fromhex(channel_id))
                raise ConsumerError(f"job {name} stopped: not paying {exc}", job=name) from exc
            if final["state"] != seen:
                say(f"  {final['state']} (channel signed {ada(payer.signer.signed)})")
                seen = final["state"]
            if final["state"] in ENDED:
                break
            time.sleep(ROUND_S)
        if final["state"] == "failed":
            raise ConsumerError(f"job {name} failed on the provider: {final['reason']}; nothing "
                                "is owed for it", job=name, reason=final["reason"])  # fmt: skip
        result = job_results(control, job, record, channels.deployment,
                             out or Path("results") / name)  # fmt: skip
    final["signed"] = payer.signer.signed
    return final, result


async def try_channel(env: Any, consumer: Any, quote: CheckedQuote, as_json: bool) -> str | None:
    """Run the quoted job over a channel if one fits (None: it ran, its outcome shown), else
    the reason it takes the escrow path."""
    import asyncio

    import typer

    from consumer.cli.main import emit
    from consumer.sdk.channel_store import ChannelStore
    from consumer.sdk.channels import Channels
    from offchain.protocol.job.jobspec import JobSpec

    channels = Channels(consumer.key, consumer.context, consumer.ogmios_url, consumer.deployment,
                        ChannelStore(env.state_dir))  # fmt: skip
    spec = JobSpec.model_validate(consumer.store.get(quote.job_id).spec)  # as quoted: pinned
    chosen = await asyncio.to_thread(route, channels, quote, spec, env.state_dir)
    if isinstance(chosen, str):
        return chosen
    cost = chosen.spec.max_cost
    say = (lambda line: None) if as_json else typer.echo
    say(
        f"over channel {chosen.record.channel_id[:16]}: no escrow, no lock fee, no settle; "
        f"this job costs at most {ada(cost)}, paid per second it runs "
        f"({ada(chosen.status.left)} left on the channel; `--escrow` locks an escrow instead)"
    )
    final, result = await asyncio.to_thread(
        run_over_channel, channels, chosen, env.state_dir, None, say
    )
    consumer.store.forget(quote.job_id)  # its quote was never locked: the channel paid
    data = {
        "path": "channel", "job": final["name"], "channel_id": chosen.record.channel_id,
        "state": final["state"], "reason": final["reason"], "units": result.units,
        "cost": result.cost, "signed": final["signed"], "sha256": result.sha256,
        "archive": str(result.archive), "unpacked": str(result.unpacked or ""),
        "price_per_second": chosen.spec.price_per_second, "quote_job_id": quote.job_id,
    }  # fmt: skip
    emit(as_json, data,
         f"job {final['name']} {final['reason']}: {result.units} s, {ada(result.cost)} paid by "
         f"IOU (channel signed {ada(final['signed'])} in all); verified: sha256 {result.sha256} "
         f"is what the provider signed; archive {result.archive}"
         + (f", unpacked in {result.unpacked}" if result.unpacked else ""))  # fmt: skip
    return None
