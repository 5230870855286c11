"""`unchained provider status`: what the daemon is doing, read from its journal and the chain
(never from the daemon itself, so it answers while the daemon is down): each slot free or
busy with which job, running jobs with their elapsed chain time and metered units so far,
earnings settled and pending, and the bond."""

from __future__ import annotations

from offchain.chain.time import iso
from provider.daemon.bond import BondView
from provider.daemon.capacity import Slot
from provider.daemon.journal import Journal
from provider.metering import billable_units

PENDING = ("finished", "delivered")


def status_lines(journal: Journal, slots: list[Slot], now_ms: int, bond: BondView) -> list[str]:
    entries = journal.entries()
    running = {e.slot: e for e in entries if e.stage in ("accepted", "running")}
    lines = [f"chain time {iso(now_ms)}"]
    for slot in slots:
        what = ", ".join(slot.gpu_uuids) or f"{slot.bundle.cpu_cores} core(s)"
        entry = running.get(slot.index)
        lines.append(f"slot {slot.index} ({what}): " + (f"busy with job {entry.job_id}"
                                                       if entry else "free"))  # fmt: skip
    for entry in running.values():
        if entry.started_at_ms is None:
            lines.append(f"job {entry.job_id}: accepted, starting")
            continue
        elapsed = max(0, now_ms - entry.started_at_ms)
        units = billable_units(elapsed, entry.spec.max_duration_s)
        lines.append(
            f"job {entry.job_id}: running {elapsed // 1000} s, {units} unit(s) x "
            f"{entry.price_per_unit} lovelace so far, escrow {entry.escrow}"
        )
    settled = sum(e.settled_lovelace or 0 for e in entries if e.stage == "settled")
    refunded = [e for e in entries if e.stage == "refunded"]
    pending = [e for e in entries if e.stage in PENDING and e.receipt]
    lines.append(f"earnings settled: {settled} lovelace")
    if refunded:
        lines.append(f"refunded to consumers (nothing earned): {len(refunded)} job(s): "
                     + ", ".join(e.job_id for e in refunded))  # fmt: skip
    lines.append(f"earnings pending: {sum(e.earned for e in pending)} lovelace "
                 f"({len(pending)} receipt(s))")  # fmt: skip
    for entry in pending:
        lines.append(f"  job {entry.job_id}: {entry.earned} lovelace, escrow {entry.escrow} "
                     f"closes {iso(entry.close_ms)}")  # fmt: skip
    lines.append(bond.describe())
    return lines
