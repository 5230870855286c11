"""The market's metrics. Counted where they happen (HTTP requests, settle batches built,
failed and confirmed) on this module's registry; computed at scrape time from the database and
the chain (jobs and settle transactions by state, follower lag, the settler's lovelace), so
any worker of `serve --workers N` reports the same truth for those.

Names follow Prometheus's rules: `unchained_market_` prefix, base units (seconds, lovelace,
blocks), `_total` on counters; no label takes an unbounded value (no job id, no key)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from sqlalchemy import func
from sqlmodel import Session, col, select

from offchain.core.metrics import LATENCY_BUCKETS_S, HttpMetrics
from offchain.market.models import Job, JobEvent, JobState, Settlement, SettlementState

if TYPE_CHECKING:  # the probes import the leader's work, which counts batches here
    from offchain.market.ops.probes import Observed

REGISTRY = CollectorRegistry(auto_describe=True)
HTTP = HttpMetrics(REGISTRY, "market")
BATCH_ESCROWS = Histogram(
    "unchained_market_settle_batch_escrows", "Escrows in each settle transaction submitted.",
    buckets=(1, 2, 5, 10, 20, 40, 60, 80, 100), registry=REGISTRY,
)  # fmt: skip
BATCH_FEES = Counter(
    "unchained_market_settle_fee_lovelace", "Fees of the settle transactions submitted.",
    registry=REGISTRY,
)  # fmt: skip
BATCH_FAILURES = Counter(
    "unchained_market_settle_batch_failures", "Settle batches that could not be built or that "
    "the ledger refused.", registry=REGISTRY,
)  # fmt: skip
SETTLE_LATENCY = Histogram(
    "unchained_market_settle_latency_seconds", "From a job's receipt to its settle "
    "transaction's confirmation by the follower.",
    buckets=(*LATENCY_BUCKETS_S[5:], 60.0, 120.0, 300.0, 600.0, 1800.0), registry=REGISTRY,
)  # fmt: skip


def batch_submitted(escrows: int, fee_lovelace: int) -> None:
    BATCH_ESCROWS.observe(escrows)
    BATCH_FEES.inc(fee_lovelace)


def batch_failed() -> None:
    BATCH_FAILURES.inc()


def settle_confirmed(session: Session, job_id: str, at_ms: int) -> None:
    """A job's settle seen in a block at `at_ms` (the market's clock): the time since its
    receipt came (its last move to completed or failed)."""
    since = session.exec(
        select(func.max(JobEvent.at_ms)).where(
            JobEvent.job_id == job_id,
            col(JobEvent.to_state).in_((JobState.COMPLETED, JobState.FAILED)),
        )
    ).one()
    if since is not None:
        SETTLE_LATENCY.observe(max(0, at_ms - since) / 1000)


def counted(session: Session) -> Iterator[Metric]:
    """Jobs and settle transactions by state, every state listed (0 where none)."""
    jobs = GaugeMetricFamily("unchained_market_jobs", "Jobs by state.", labels=["state"])
    by_state = dict(session.exec(select(Job.state, func.count()).group_by(col(Job.state))).all())
    for state in JobState:
        jobs.add_metric([state.value], by_state.get(state, 0))
    yield jobs
    settles = GaugeMetricFamily(
        "unchained_market_settle_transactions", "Settle transactions by state.", labels=["state"]
    )
    query = select(Settlement.state, func.count()).group_by(col(Settlement.state))
    by_settle = dict(session.exec(query).all())
    for sent in SettlementState:
        settles.add_metric([sent.value], by_settle.get(sent, 0))
    yield settles


def observed(seen: Observed) -> Iterator[Metric]:
    """What the probes saw: each dependency up or not, the follower's lag, the leader, the
    settler's lovelace (absent when unknown, so an alert on it never reads a made-up 0)."""
    up = GaugeMetricFamily(
        "unchained_market_dependency_up", "Whether a dependency answered the last probe.",
        labels=["dependency"],
    )  # fmt: skip
    up.add_metric(["database"], seen.database_error is None)
    up.add_metric(["chain"], seen.chain_error is None)
    yield up
    if seen.lag_blocks is not None:
        yield GaugeMetricFamily(
            "unchained_market_follower_lag_blocks", "The chain's tip height minus the height "
            "of the last block the follower applied.", value=seen.lag_blocks,
        )  # fmt: skip
    yield GaugeMetricFamily(
        "unchained_market_leader", "1 when this process leads (follows the chain, settles).",
        value=seen.leading,
    )  # fmt: skip
    if seen.wallet_lovelace is not None:
        yield GaugeMetricFamily(
            "unchained_market_wallet_lovelace", "Lovelace in the settler's wallet.",
            value=seen.wallet_lovelace,
        )  # fmt: skip
