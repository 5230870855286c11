"""How the explorer writes numbers for people, from integers only (lovelace, ms), and the inline
SVG charts it draws (usage from the metering record, earnings per day) as plain coordinates."""

from __future__ import annotations

import itertools
import time
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

from markupsafe import Markup

from offchain.protocol.job.outcome import describe
from offchain.protocol.ledger.amounts import ada as exact_ada

HOUR_S = 3600
TOKENS_QUOTED = 1_000_000  # token prices are quoted per million tokens
MIB = 1 << 20
PERMILLE = 1000
CHART_W, CHART_H = 600, 160
DAY_MS = 86_400_000
CHART_DAYS = 30  # the earnings chart: the last this many days, each a bar, idle ones too
LABEL_H = 16  # the earnings chart's day labels, under its bars


def ada(lovelace: int | None) -> str:
    """`12.500000 ADA` from 12_500_000, as the CLI and the dApp write it: whole ADA with
    thousands, all 6 decimals (every amount in a column lines up, to the lovelace)."""
    return "—" if lovelace is None else exact_ada(lovelace)


def amount(lovelace: int | None) -> Markup:
    """A table's amount: ADA with its 6 decimals, the lovelace on hover (its title)."""
    if lovelace is None:
        return Markup("—")
    return Markup('<span title="{:,} lovelace">{}</span>').format(lovelace, ada(lovelace))


def when(posix_ms: int | None) -> str:
    """The UTC date and time of `posix_ms`; a stored value no calendar can show (a key's offer
    may claim any time) is written as the number it is, never an error that breaks the page."""
    if posix_ms is None:
        return "—"
    try:
        moment = datetime.fromtimestamp(posix_ms // 1000, UTC)
    except (OverflowError, ValueError, OSError):
        return f"{posix_ms} ms since 1970 (no date)"
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


# The time of the chain's tip for the page being drawn (`routes.render` sets it): a deadline
# passes when a block past it is made, not by this machine's clock (blocks come at random,
# ~20 s apart on mainnet). None: the tip is not known, the market's clock stands in.
CHAIN_NOW: ContextVar[int | None] = ContextVar("chain_now_ms", default=None)


def when_left(posix_ms: int | None) -> str:
    """A deadline or close as people check it: its UTC date and how long from the chain's
    tip (`in 59 m 58 s of chain time`, `passed 2 m 01 s ago`), never the raw ms the datum
    holds."""
    if posix_ms is None:
        return "—"
    tip = CHAIN_NOW.get()
    now, clock = (time.time_ns() // 1_000_000, "market clock") if tip is None else (tip, "chain")
    left = posix_ms - now
    relative = f"in {duration(left)}" if left >= 0 else f"passed {duration(-left)} ago"
    return f"{when(posix_ms)} ({relative}, {clock} time)"


def per_hour(lovelace_per_s: int | None) -> str:
    """A price as people compare them, in ADA per hour, with the on-chain unit (lovelace per
    second) beside it."""
    if lovelace_per_s is None:
        return "—"
    return f"{ada(lovelace_per_s * HOUR_S)} per hour ({lovelace_per_s:,} lovelace per s)"


def per_token(lovelace: int | None) -> str:
    """A token price as LLM prices are compared, in ADA per million tokens, with the unit the
    gateway bills (lovelace a token) beside it."""
    if lovelace is None:
        return "—"
    return f"{ada(lovelace * TOKENS_QUOTED)} per million tokens ({lovelace:,} lovelace each)"


def duration(ms: int | None) -> str:
    """`1 h 02 m 05 s`, `3.250 s`: integer ms as people read them."""
    if ms is None:
        return "—"
    seconds, rest = divmod(ms, 1000)
    if seconds < 60:
        return f"{seconds}.{rest:03d} s"
    minutes, seconds = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} m {seconds:02d} s" if hours else f"{minutes} m {seconds:02d} s"


def percent(part: int, whole: int) -> str:
    """`part` of `whole` as a percentage with one decimal, rounded half up, in integers (no
    float to overflow or round differently)."""
    if not whole:
        return "—"
    tenths = (2000 * part + whole) // (2 * whole)
    return f"{tenths // 10}.{tenths % 10} %"


def short(text: str | None, keep: int = 10) -> str:
    """A long hash or address cut in the middle (the full one goes in the title)."""
    if not text:
        return "—"
    return text if len(text) <= 2 * keep + 1 else f"{text[:keep]}…{text[-6:]}"


def _points(values: list[tuple[int, int]], t_max: int) -> str:
    """SVG polyline points for (t_ms, per-mille) pairs across the chart."""
    span = max(t_max, 1)
    return " ".join(
        f"{t * CHART_W // span},{CHART_H - min(max(v, 0), PERMILLE) * CHART_H // PERMILLE}"
        for t, v in values
    )


def usage_chart(record: dict[str, Any]) -> list[dict[str, str]]:
    """CPU (of the reserved cores), memory (of the reserved memory) and GPU SM use (of the
    GPU, or of the job's slice of a shared one) over the job, each as per-mille series drawn
    as one polyline."""
    samples = record["samples"]
    t_max = max([s["t_ms"] for s in samples] + [g["t_ms"] for g in record["gpu_samples"]] + [1])
    cpu = [
        (b["t_ms"], (b["cpu_ns"] - a["cpu_ns"]) * PERMILLE
         // max(1, (b["t_ms"] - a["t_ms"]) * 1_000_000 * record["cpu_cores"]))
        for a, b in itertools.pairwise(samples)
    ]  # fmt: skip
    limit = max(1, record["memory_mib"] * MIB)
    memory = [(s["t_ms"], s["memory_bytes"] * PERMILLE // limit) for s in samples]
    first_gpu = record["gpu_uuids"][0] if record["gpu_uuids"] else None
    # a job on a slice of a shared GPU: its own processes' SM use, of its slice's share
    share = record.get("gpu_share")
    of_percent, gpu_label = 100, "GPU (SM)"
    if share is not None:
        first_gpu, of_percent = share["uuid"], share["sm_percent"]
        gpu_label = f"GPU (SM, of its {of_percent}% slice)"
    gpu = [
        (g["t_ms"], g["sm_percent"] * PERMILLE // of_percent)
        for g in record["gpu_samples"]
        if g["uuid"] == first_gpu and g["sm_percent"] is not None
    ]
    series = (("cpu", "CPU", cpu), ("memory", "memory", memory), ("gpu", gpu_label, gpu))
    return [
        {"key": key, "label": label, "points": _points(values, t_max)}
        for key, label, values in series
        if values
    ]


def earnings_bars(days: list[dict[str, int]]) -> list[dict[str, Any]]:
    """One bar per day from the first day with earnings (at most CHART_DAYS before the last)
    to the last, a day without earnings a bar of none, heights relative to the best day; each
    labelled with its day of the month, and its month where one begins or the chart does."""
    if not days:
        return []
    earned = {d["day_ms"]: d["lovelace"] for d in days}
    last = max(earned)
    first = max(min(earned), last - (CHART_DAYS - 1) * DAY_MS)
    shown = range(first, last + 1, DAY_MS)
    top = max(max(earned.get(day, 0) for day in shown), 1)
    width = max(CHART_W // len(shown), 1)
    bars = []
    for i, day in enumerate(shown):
        date = datetime.fromtimestamp(day // 1000, UTC)
        label = date.strftime("%b %-d") if i == 0 or date.day == 1 else str(date.day)
        lovelace = earned.get(day, 0)
        bars.append({"x": i * width, "width": max(width - 2, 1), "label": label, "day_ms": day,
                     "height": lovelace * CHART_H // top, "lovelace": lovelace})  # fmt: skip
    return bars


FILTERS = {"ada": ada, "amount": amount, "when": when, "when_left": when_left, "per_hour": per_hour,
           "per_token": per_token, "duration": duration, "short": short,
           "percent": percent}  # fmt: skip
GLOBALS = {"usage_chart": usage_chart, "earnings_bars": earnings_bars, "ended": describe,
           "chart_w": CHART_W, "chart_h": CHART_H, "label_h": LABEL_H}  # fmt: skip
