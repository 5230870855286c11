"""Ogmios's `GET /health` and `GET /metrics`, served from the devnet's own state.

Clients read `/health` before they open a socket (the TypeScript client refuses a server whose
`lastTipUpdate` is null), so the shape follows Ogmios v6: `Ogmios.Data.Health` and
`Ogmios.Data.Metrics`, and the Prometheus names of `Ogmios.Data.Metrics.Prometheus`.
"""

from __future__ import annotations

import dataclasses
import datetime
import gc
import resource
import time
from typing import Any

from devnet import genesis_json
from devnet.node import Devnet

OGMIOS_VERSION = "v6.14.0 (unchained devnet)"
SYNCHRONIZATION_TOLERANCE_S = 60  # as Ogmios: a tip this close to the wall clock is in sync
SYNCHRONIZATION_PRECISION = 100_000  # five decimals, as Ogmios prints it
PAGE_KIB = resource.getpagesize() // 1024


@dataclasses.dataclass
class ServerStats:
    """What Ogmios counts about its connections and messages."""

    start_ns: int = dataclasses.field(default_factory=time.time_ns)
    active_connections: int = 0
    total_connections: int = 0
    total_messages: int = 0
    total_unrouted: int = 0  # messages no mini-protocol takes: not JSON-RPC, unknown method
    session_ms: list[int] = dataclasses.field(default_factory=list)
    gc_ns: int = 0
    _gc_started_ns: int = 0

    def watch_garbage_collector(self) -> None:
        """Time every collection, for runtimeStats.gcCpuTime."""
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_started_ns = time.process_time_ns()
        else:
            self.gc_ns += time.process_time_ns() - self._gc_started_ns

    def opened(self) -> int:
        """Count a new connection; returns its start, for `closed`."""
        self.active_connections += 1
        self.total_connections += 1
        return time.monotonic_ns()

    def closed(self, started_ns: int) -> None:
        self.active_connections -= 1
        self.session_ms.append((time.monotonic_ns() - started_ns) // 1_000_000)

    def metrics(self) -> dict[str, Any]:
        sessions = self.session_ms or [0]
        return {
            "activeConnections": self.active_connections,
            "runtimeStats": {
                "cpuTime": time.process_time_ns(),
                "gcCpuTime": self.gc_ns,
                "maxHeapSize": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                "currentHeapSize": _resident_kib(),
            },
            "sessionDurations": {
                "max": max(sessions),
                "mean": sum(sessions) // len(sessions),
                "min": min(sessions),
            },
            "totalConnections": self.total_connections,
            "totalMessages": self.total_messages,
            "totalUnrouted": self.total_unrouted,
        }


def health(devnet: Devnet, stats: ServerStats) -> dict[str, Any]:
    """The `/health` document: the devnet is its own node, so it is always connected."""
    tip = devnet.tip
    return {
        "startTime": _utc(stats.start_ns),
        "lastKnownTip": {"slot": tip.slot, "id": tip.id.hex(), "height": tip.height},
        "lastTipUpdate": _utc(devnet.tip_changed_ns),
        "networkSynchronization": _synchronization(devnet),
        "currentEra": "conway",
        "metrics": stats.metrics(),
        "connectionStatus": "connected",
        "currentEpoch": devnet.epoch,
        "slotInEpoch": tip.slot % devnet.genesis.epoch_length,
        "version": OGMIOS_VERSION,
        "network": f"unknown ({genesis_json.NETWORK_MAGIC})",  # Ogmios's name for other magics
    }


def prometheus(document: dict[str, Any]) -> str:
    """`/health` as Ogmios's Prometheus text (`ogmios_` gauges and counters)."""
    metrics = document["metrics"]
    runtime = metrics["runtimeStats"]
    sessions = metrics["sessionDurations"]
    samples: list[tuple[str, str, int | float]] = [
        ("connected", "gauge", int(document["connectionStatus"] == "connected")),
        ("network_synchronization", "gauge", document["networkSynchronization"]),
        ("current_epoch", "counter", document["currentEpoch"]),
        ("slot_in_epoch", "counter", document["slotInEpoch"]),
        ("active_connections", "gauge", metrics["activeConnections"]),
        ("total_connections", "counter", metrics["totalConnections"]),
        ("total_messages", "counter", metrics["totalMessages"]),
        ("total_unrouted", "counter", metrics["totalUnrouted"]),
        ("max_heap_size", "gauge", runtime["maxHeapSize"]),
        ("current_heap_size", "gauge", runtime["currentHeapSize"]),
        ("cpu_time", "counter", runtime["cpuTime"]),
        ("gc_cpu_time", "counter", runtime["gcCpuTime"]),
        *((f"session_duration_{stat}", "gauge", sessions[stat]) for stat in ("mean", "min", "max")),
        ("tip_block", "counter", document["lastKnownTip"]["height"]),
        ("tip_slot", "counter", document["lastKnownTip"]["slot"]),
    ]
    return "".join(
        f"# TYPE ogmios_{name} {kind}\nogmios_{name} {value}\n" for name, kind, value in samples
    )


def _synchronization(devnet: Devnet) -> float:
    """Ogmios's measure: the tip's time over the time since the system start, at most 1."""
    genesis = devnet.genesis
    tip_s = devnet.tip.slot * genesis.slot_length_ms // 1000
    now_s = time.time_ns() // 1_000_000_000 - genesis.system_start_s
    if abs(tip_s - now_s) <= SYNCHRONIZATION_TOLERANCE_S or now_s <= 0:
        return 1.0
    return min(SYNCHRONIZATION_PRECISION, tip_s * SYNCHRONIZATION_PRECISION // now_s) / (
        SYNCHRONIZATION_PRECISION
    )


def _utc(ns: int) -> str:
    """An Ogmios UTCTime: ISO 8601 with fractional seconds, in UTC."""
    moment = datetime.datetime.fromtimestamp(ns // 1_000_000_000, datetime.UTC)
    return f"{moment:%Y-%m-%dT%H:%M:%S}.{ns % 1_000_000_000:09d}Z"


def _resident_kib() -> int:
    """The process's resident memory now (Linux), else its peak."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * PAGE_KIB
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
