"""Batch jobs paid over a payment channel, renter side: no escrow, no lock fee, no settle per
job. The job (the same JobSpec an escrowed job runs) is deployed on the provider's gateway
with a signed control request on an open channel to that provider (`deploy_job`), paid per
second by IOUs while it runs as a pod is (`consumer.cli.pod_agent`'s rounds: the exact due,
never above the renter's own count of seconds), and once it ended its receipt and result
archive are fetched with signed requests and verified exactly as an escrowed job's are
(`consumer.sdk.verified`): the receipt signed by the provider key of the renter's own channel
record, the archive's sha256 the receipt's.

A job whose most cost (price per second x max duration) is above what the channel has left
is refused here, before anything is signed (`ChannelJobRefused`).

While it runs, `JobPayer` pays its seconds (two requests a round, whatever else the channel
paid for before: the pod agent's `pay_due` asks the status of every deployment on the
channel, which grows with each job run on it): what the channel owes may be at most what was
signed when the job was deployed (everything before it was paid) plus the job's price for the
seconds it ran by the renter's own clock, one second of slack."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from consumer.sdk.channel_store import ChannelRecord
from consumer.sdk.endpoint_client import EndpointRefused, GatewayControl, seconds_run
from consumer.sdk.errors import ConsumerError
from consumer.sdk.iou_signer import IouSigner
from consumer.sdk.rental_store import RentalRecord, RentalStore
from consumer.sdk.session import VerifiedResult
from consumer.sdk.verified import RESULT_FILE, kept_archive, signed_receipt
from offchain.protocol.job.channel_job import (
    CHANNEL_JOB,
    ChannelJobSpec,
    parse_channel_job,
    receipt_ref,
)
from offchain.protocol.job.jobspec import JobSpec, JobSpecError
from offchain.protocol.ledger.amounts import ada
from offchain.protocol.tx.deployment import Deployment


class ChannelJobRefused(ConsumerError):
    """This job is not run over that channel (nothing was signed): the message says why."""


def channel_job(spec: JobSpec, price_per_second: int) -> ChannelJobSpec:
    """`spec` deployed at `price_per_second`; ChannelJobRefused when the job's own
    max_price_lovelace does not allow that price for its max duration."""
    wire = {"kind": CHANNEL_JOB, "price_per_second": price_per_second,
            "job": spec.model_dump(mode="json")}  # fmt: skip
    try:
        return parse_channel_job(wire)
    except JobSpecError as exc:
        raise ChannelJobRefused(str(exc)) from exc


def room_refusal(spec: ChannelJobSpec, left: int, channel_id: str) -> str | None:
    """Why `spec` does not fit a channel with `left` lovelace not signed away (None: it does)."""
    if spec.max_cost <= left:
        return None
    return (f"this job may cost {ada(spec.max_cost)} ({spec.job.max_duration_s} s at "
            f"{spec.price_per_second:,} lovelace per second), more than the {ada(left)} "
            f"channel {channel_id[:16]} has left")  # fmt: skip


def deploy_job(
    control: GatewayControl, store: RentalStore, name: str, spec: ChannelJobSpec,
    channel: ChannelRecord, left: int, gateway_url: str, admission: tuple[str, str] | None,
) -> RentalRecord:  # fmt: skip
    """Deploy `spec` as job `name` on `channel` (`left`: lovelace it has not signed away) and
    record it here; ChannelJobRefused before anything is signed when it may cost more than
    `left`, ConsumerError with the gateway's refusal (the record dropped)."""
    refusal = room_refusal(spec, left, channel.channel_id)
    if refusal is not None:
        raise ChannelJobRefused(f"{refusal}: nothing was signed", max_cost=spec.max_cost,
                                left=left)  # fmt: skip
    record = RentalRecord(
        name=name, kind=CHANNEL_JOB, gateway_url=gateway_url, provider_id=channel.provider_id,
        channel_id=channel.channel_id, spec=spec.model_dump(mode="json"), price_per_request=0,
        price_per_second=spec.price_per_second, created_ms=time.time_ns() // 1_000_000,
    )  # fmt: skip
    store.save(record)  # first: a round that pays the channel counts it
    try:
        control.deploy(name, bytes.fromhex(channel.channel_id), record.spec, admission)
    except ConsumerError:
        store.forget(name)
        raise
    return record


PAY_ATTEMPTS = 3  # a 402 when a second passed between reading the due and paying it
PAYMENT_REQUIRED = 402


class JobPayer:
    """Pays what one channel job's channel owes, round by round, up to the renter's count."""

    def __init__(self, control: GatewayControl, signer: IouSigner, job: RentalRecord) -> None:
        self.control, self.signer, self.job = control, signer, job
        self.channel = bytes.fromhex(job.channel_id)
        self.baseline = signer.signed  # the channel's IOUs before the job: all it owed then

    def round(self) -> dict[str, Any]:
        """Pay the due the gateway names (if it grew) and return the job's status read for it;
        EndpointRefused (nothing signed) when the due is above the renter's count."""
        for attempt in range(PAY_ATTEMPTS):
            status = self.control.status(self.job.name, self.channel)
            due = int(status["due"])
            now = time.time_ns() // 1_000_000
            seconds = seconds_run(status, self.job.created_ms, now) + 1
            ceiling = self.baseline + self.job.price_per_second * seconds
            if due > ceiling:
                raise EndpointRefused(
                    f"the gateway asks for {ada(due)} on channel {self.job.channel_id[:16]}, "
                    f"more than the {ada(ceiling)} counted here for job {self.job.name}: not "
                    "signed", due=due, ceiling=ceiling,
                )  # fmt: skip
            if due <= self.signer.signed:
                return status
            try:
                self.control.pay(self.job.name, self.signer.pay(due, due))
                return status
            except ConsumerError as exc:
                if exc.details.get("status") != PAYMENT_REQUIRED or attempt == PAY_ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable: the last attempt returns or raises")


def job_results(
    control: GatewayControl, record: RentalRecord, channel: ChannelRecord,
    deployment: Deployment, into: Path, unpack: bool = True,
) -> VerifiedResult:  # fmt: skip
    """Fetch the ended job's receipt and result archive into `into` and verify them: the
    receipt signed by the provider key of `channel` (the renter's own record) for the job's
    receipt out-ref, the archive its result hash; only then unpacked (into `into/out`).
    ResultMismatch when either fails (nothing unpacked, the download removed)."""
    channel_id = bytes.fromhex(record.channel_id)
    body = control.receipt(record.name, channel_id)
    vkey = channel.terms.provider_vkey
    ref = receipt_ref(channel_id, record.name)
    receipt = signed_receipt(ref, body, vkey, deployment, whose="the channel's provider key")
    into.mkdir(parents=True, exist_ok=True)
    partial = into / f".{RESULT_FILE}.part"
    arrived = control.download(record.name, channel_id, partial)
    kept = {**receipt.record(deployment), "job": record.name, "provider_vkey": vkey.hex(),
            "channel_id": record.channel_id, "status": body.get("status"),
            "exit_code": body.get("exit_code")}  # fmt: skip
    text = json.dumps(kept, indent=2, sort_keys=True) + "\n"
    archive, unpacked = kept_archive(partial, arrived, receipt, into, unpack, text)
    units = receipt.units
    return VerifiedResult(record.name, archive, unpacked, arrived, archive.stat().st_size, units,
                          record.price_per_second * units)  # fmt: skip
