"""`unchained provider status`: what the daemon is doing, read from its journal and the chain
(never from the daemon itself, so it answers while the daemon is down): each slot free or
busy with which job, running jobs with their elapsed chain time and metered units so far,
earnings settled and pending, the payment channels it serves (claimed on chain, and what
their latest IOUs hold beyond), the net income (`provider.money.own_transactions`), the bond,
and each compute process on the machine's GPUs, a job's or the operator's own (metered, never
billed); as lines in ADA, or with `--json` as data in lovelace."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from typing import Any

import docker
from docker.errors import DockerException

from offchain.chain.time import iso
from offchain.protocol.ledger.amounts import ada
from offchain.protocol.tx.channel import OPEN
from provider.capacity import Slot
from provider.daemon.bond import BondView
from provider.daemon.journal import Journal
from provider.gpu import nvml
from provider.gpu.inventory import HostInventory
from provider.metering.cgroups import in_any_job
from provider.metering.gpu import GpuProcess, gpu_processes
from provider.metering.sampler import billable_units
from provider.money.channel_book import ChannelBook
from provider.money.own_transactions import OwnTransactions
from provider.sandbox.hardening import LABEL_RUNNER

PENDING = ("finished", "delivered")


def host_gpu_processes(
    inventory: HostInventory, containers: Collection[str] = ()
) -> list[GpuProcess]:
    """The compute processes on the machine's GPUs now, each a renter's (a job's, or in one of
    the provider's `containers`: services, pods) or the operator's."""
    uuids = [gpu.uuid for gpu in inventory.gpu.gpus]
    try:
        return gpu_processes(uuids, lambda pid: in_any_job(pid, containers)) if uuids else []
    except nvml.NoGpu:
        return []


def renter_containers() -> set[str]:
    """Full ids of every container a runner of this machine started (none without an engine)."""
    try:
        client = docker.from_env()
        listed = client.containers.list(filters={"label": LABEL_RUNNER}, sparse=True)
    except DockerException:
        return set()
    return {container.id for container in listed if container.id}


def provider_status(
    journal: Journal, slots: list[Slot], now_ms: int, bond: BondView, book: ChannelBook,
    own: OwnTransactions, gpus: list[GpuProcess] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """The status as data (`provider status --json`): lovelace and chain-time ms, integers."""
    entries = journal.entries()
    running = {e.slot: e for e in entries if e.stage in ("accepted", "running")}
    jobs = []
    for entry in running.values():
        elapsed = None if entry.started_at_ms is None else max(0, now_ms - entry.started_at_ms)
        units = 0 if elapsed is None else billable_units(elapsed, entry.spec.max_duration_s)
        jobs.append({"job_id": entry.job_id, "escrow": entry.escrow, "elapsed_ms": elapsed,
                     "units": units, "price_per_unit": entry.price_per_unit,
                     "lovelace_so_far": units * entry.price_per_unit})  # fmt: skip
    pending = [e for e in entries if e.stage in PENDING and e.receipt]
    slot_rows = [
        {
            "index": slot.index,
            "resources": slot_resources(slot),
            "job_id": running[slot.index].job_id if slot.index in running else None,
        }
        for slot in slots
    ]
    settled = sum(e.settled_lovelace or 0 for e in entries if e.stage == "settled")
    channels = channels_status(book)
    income = own.income(settled, channels["claimed_lovelace"])
    return {
        "chain_time_ms": now_ms,
        "slots": slot_rows,
        "running": jobs,
        "settled_lovelace": settled,
        "refunded_jobs": [e.job_id for e in entries if e.stage == "refunded"],
        "pending_lovelace": sum(e.earned for e in pending),
        "pending": [
            {"job_id": e.job_id, "lovelace": e.earned, "escrow": e.escrow, "close_ms": e.close_ms}
            for e in pending
        ],
        "channels": channels,
        "income": {**dataclasses.asdict(income), "net": income.net},
        "bond": dataclasses.asdict(bond),
        "gpu_processes": [
            {**dataclasses.asdict(p), "owner": "job" if p.job else "operator"} for p in gpus or []
        ],
    }


def channels_status(book: ChannelBook) -> dict[str, int]:
    """The channels in the book: how many are open and closing, the lovelace claimed on chain
    from all of them, and what the live ones' latest IOUs hold beyond that, yet to claim."""
    entries = book.entries()
    live = [e for e in entries if not e.ended]
    return {
        "open": sum(e.view.closing_at == OPEN for e in live),
        "closing": sum(e.view.closing_at != OPEN for e in live),
        "claimed_lovelace": sum(e.view.claimed for e in entries),
        "unclaimed_lovelace": sum(e.unclaimed for e in live),
    }


def status_lines(status: dict[str, Any]) -> list[str]:
    """The status as people read it: amounts in ADA (exact), times in UTC."""
    lines = [f"chain time {iso(status['chain_time_ms'])}"]
    for slot in status["slots"]:
        busy = f"busy with job {slot['job_id']}" if slot["job_id"] else "free"
        lines.append(f"slot {slot['index']} ({slot['resources']}): {busy}")
    for job in status["running"]:
        if job["elapsed_ms"] is None:
            lines.append(f"job {job['job_id']}: accepted, starting")
            continue
        lines.append(
            f"job {job['job_id']}: running {job['elapsed_ms'] // 1000} s, {job['units']} "
            f"unit(s) x {job['price_per_unit']} lovelace = {ada(job['lovelace_so_far'])} so far, "
            f"escrow {job['escrow']}"
        )
    lines.append(f"earnings settled: {ada(status['settled_lovelace'])}")
    if status["refunded_jobs"]:
        lines.append(f"refunded to consumers (nothing earned): {len(status['refunded_jobs'])} "
                     f"job(s): {', '.join(status['refunded_jobs'])}")  # fmt: skip
    lines.append(f"earnings pending: {ada(status['pending_lovelace'])} "
                 f"({len(status['pending'])} receipt(s))")  # fmt: skip
    for job in status["pending"]:
        lines.append(f"  job {job['job_id']}: {ada(job['lovelace'])}, escrow {job['escrow']} "
                     f"closes {iso(job['close_ms'])}")  # fmt: skip
    channels = status["channels"]
    lines.append(f"channels: {channels['open']} open, {channels['closing']} closing; claimed "
                 f"{ada(channels['claimed_lovelace'])}, IOUs not yet claimed "
                 f"{ada(channels['unclaimed_lovelace'])}")  # fmt: skip
    income = status["income"]
    lines.append(f"net income: {ada(income['net'])} = settled {ada(income['payouts'])} + "
                 f"claimed {ada(income['claimed'])} + fee allowances "
                 f"{ada(income['allowances'])} - fees {ada(income['fees'])} (the change of "
                 "your wallet and payout address, less what went into your bond)")  # fmt: skip
    for process in status["gpu_processes"]:
        sm = "?" if process["sm_percent"] is None else f"{process['sm_percent']}%"
        billed = "a job's" if process["job"] else "the operator's own, not billed"
        lines.append(f"gpu {process['uuid']} process {process['pid']} ({billed}): "
                     f"{process['memory_bytes'] >> 20} MiB, SMs {sm}")  # fmt: skip
    bond = status["bond"]
    if bond["ref"] is None:
        lines.append("no bond")
    else:
        ends = bond["unbonding_ends_ms"]
        state = "active" if ends is None else f"unbonding, withdrawable from {iso(ends)}"
        lines.append(f"bond {bond['ref']}: {ada(bond['lovelace'])}, {state}")
    return lines


def slot_resources(slot: Slot) -> str:
    """What a slot holds, for the operator: its GPUs, its slice of a GPU, or its cores."""
    piece = slot.gpu_slice
    if piece is not None:
        return (f"{piece.memory_mib} MiB / {piece.sm_percent}% SMs of {piece.device} "
                f"({piece.isolation})")  # fmt: skip
    return ", ".join(slot.gpu_uuids) or f"{slot.bundle.cpu_cores} core(s)"
