"""The provider's metrics: its daemon's and its gateway's, on one registry (each process
exposes what it counts; the rest stays at zero). Counted where they happen: HTTP requests at
the gateway, IOUs the channel book took or refused, containers started or not; computed at
scrape time: the daemon's slots busy and free, and the channel book's acknowledged and
claimed lovelace (what the renters owe against what the chain has paid).

Served from a thread on a local address (`offchain.core.metrics.serve`): the daemon has no
HTTP server, and the gateway faces renters, who have no business reading them."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from offchain.core.metrics import UNMATCHED, Computed, HttpMetrics, Scope, serve

if TYPE_CHECKING:  # the book counts its IOUs here: this module imports nothing of ours at run
    from provider.capacity import Capacity
    from provider.money.channel_book import ChannelBook

log = logging.getLogger(__name__)
REGISTRY = CollectorRegistry(auto_describe=True)
GATEWAY_HTTP = HttpMetrics(REGISTRY, "gateway")
IOUS = Counter(
    "unchained_provider_channel_ious", "IOUs the channel book was given, by outcome "
    "(accepted: stored; refused: unknown channel, bad signature, stale, above the channel).",
    ["outcome"], registry=REGISTRY,
)  # fmt: skip
CONTAINER_STARTS = Counter(
    "unchained_provider_container_starts", "Job containers started.", registry=REGISTRY
)
CONTAINER_FAILURES = Counter(
    "unchained_provider_container_start_failures", "Job containers that could not be made or "
    "started (an image, an input, the engine).", registry=REGISTRY,
)  # fmt: skip
JOB_CPU = Counter(
    "unchained_provider_job_cpu_seconds", "CPU time the jobs' cgroups used, all jobs together "
    "(its rate: the cores they keep busy).", registry=REGISTRY,
)  # fmt: skip
GPU_SM = Gauge(
    "unchained_provider_gpu_sm_percent", "The busiest job process's share of a GPU's SMs at "
    "the last sample (0 when no job runs on it).", ["gpu"], registry=REGISTRY,
)  # fmt: skip
GPU_MEMORY = Gauge(
    "unchained_provider_gpu_job_memory_bytes", "GPU memory held by the job's processes at the "
    "last sample (0 when no job runs on it).", ["gpu"], registry=REGISTRY,
)  # fmt: skip
GATEWAY_ROUTES = ("/endpoints", "/deployments")


def gateway_route(scope: Scope) -> str:
    """The gateway's route template: `/endpoints`, `/endpoints/{name}/{path}`, `/deployments`
    or `/deployments/{path}`; anything else is unmatched (never the raw path)."""
    path: str = scope["path"]
    for prefix in GATEWAY_ROUTES:
        if path.rstrip("/") == prefix:
            return prefix
        if path.startswith(prefix + "/"):
            return prefix + ("/{name}/{path}" if prefix == "/endpoints" else "/{path}")
    return UNMATCHED


def slots(capacity: Capacity) -> Computed:
    def made() -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "unchained_provider_slots", "The daemon's job slots, busy and free.", labels=["state"]
        )
        free = capacity.free()
        family.add_metric(["free"], free)
        family.add_metric(["busy"], len(capacity.slots) - free)
        yield family

    return Computed(made)


def channel_book(book: ChannelBook) -> Computed:
    def made() -> Iterator[Metric]:
        live = book.live()
        yield GaugeMetricFamily(
            "unchained_provider_channels_live", "Channels the chain still holds.", value=len(live)
        )
        yield GaugeMetricFamily(
            "unchained_provider_channel_acknowledged_lovelace", "What the latest IOUs of live "
            "channels name in all: owed to this provider, claimed or not.",
            value=sum(entry.iou.amount for entry in live if entry.iou is not None),
        )  # fmt: skip
        yield GaugeMetricFamily(
            "unchained_provider_channel_claimed_lovelace", "What the chain has paid out of "
            "live channels to this provider so far.",
            value=sum(entry.view.claimed for entry in live),
        )  # fmt: skip

    return Computed(made)


def serving(listen: str, *collectors: Computed) -> Callable[[], None]:
    """`serve` this registry and `collectors` on `listen` ("" : not at all); one that cannot
    bind is logged and skipped: metrics never keep a provider from working."""
    if not listen:
        return lambda: None
    try:
        stop = serve(listen, REGISTRY, *collectors)
    except OSError as exc:
        log.warning("metrics not served on %s: %s", listen, exc)
        return lambda: None
    log.info("metrics on http://%s/metrics", listen)
    return stop
