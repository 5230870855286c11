"""The leader's scheduled work (APScheduler): quote expiry, the settlement batcher, the deadline
watch, provider liveness, forgetting stale nonces and finished jobs' results past retention.
Each job runs alone (one instance, missed runs coalesced) in a worker thread, with its own
database session; chain time comes from the chain's tip.

All of the market's work on a timer runs here, none as an asyncio loop: every step of it is
synchronous database and chain work, which on the event loop would need a thread hop each.
The event loop keeps what waits on a socket or on other tasks: the chain follower (driven by
its chain-sync connection, each block applied in a worker thread), the leadership loop that
starts and stops this scheduler, and the event feed that wakes live streams.
"""

from __future__ import annotations

import logging

from apscheduler.schedulers.background import BackgroundScheduler
from sqlalchemy import Engine
from sqlmodel import Session, col, select

from offchain.chain.time import iso
from offchain.market.models import Cause, JobEvent, JobState, Provider
from offchain.market.services import jobs, nonces, storage
from offchain.market.services.chain import Chain
from offchain.market.services.settlement import Batcher
from offchain.market.settings import MarketSettings

S = JobState
log = logging.getLogger("unchained.market")
NOT_DELIVERED = (S.FUNDED, S.ACCEPTED, S.RUNNING)  # past the deadline, these failed


def expire_quotes(engine: Engine, chain: Chain) -> None:
    """Quotes nobody locked in time become expired (a late lock still funds them)."""
    now = chain.now_ms()
    with Session(engine) as session:
        for job in jobs.quotes_expired(session, now):
            jobs.transition(
                session, job, S.EXPIRED, Cause.SCHEDULER, f"quote ran out at {iso(now)}"
            )
        session.commit()


def watch_deadlines(engine: Engine, chain: Chain) -> None:
    """A job not delivered by its deadline fails; once deadline + window has passed, the job's
    consumer is told (an event) that a refund, and with an acceptance a slash, is possible, and
    until when only it may (the deployment's refund window)."""
    now = chain.now_ms()
    window = chain.deployment.refund_window_ms
    with Session(engine) as session:
        for job in jobs.past_deadline(session, now):
            if job.state in NOT_DELIVERED:
                job.failure_reason = "the deadline passed without a receipt"
                jobs.transition(session, job, S.FAILED, Cause.SCHEDULER, job.failure_reason)
            close = job.close_ms
            if job.refundable_since_ms is None and close < now:
                job.refundable_since_ms = now
                slash = " and a slash of the provider's bond" if job.acceptance_signature else ""
                session.add(job)
                session.add(JobEvent(
                    job_id=job.id, at_ms=jobs.now_ms(), from_state=job.state, to_state=job.state,
                    cause=Cause.SCHEDULER,
                    detail=f"unsettled at {iso(close)}: a refund{slash} is possible, by the "
                    f"consumer alone until {iso(close + window)}",
                ))  # fmt: skip
        session.commit()


def check_liveness(engine: Engine, online_ms: int) -> None:
    """A provider that missed its heartbeats is offline from when its last one ran out (its
    offers no longer match); a fresh heartbeat brings it back."""
    cutoff = jobs.now_ms() - online_ms
    with Session(engine) as session:
        stale = select(Provider).where(
            col(Provider.last_heartbeat_ms) < cutoff, col(Provider.offline_since_ms).is_(None)
        )
        for provider in session.exec(stale):
            provider.offline_since_ms = provider.last_heartbeat_ms + online_ms
            session.add(provider)
        back = select(Provider).where(
            col(Provider.last_heartbeat_ms) >= cutoff, col(Provider.offline_since_ms).is_not(None)
        )
        for provider in session.exec(back):
            provider.offline_since_ms = None
            session.add(provider)
        session.commit()


def forget_nonces(engine: Engine) -> None:
    """Stale requests' nonces go here rather than on each signed request (its one write)."""
    nonces.forget_stale(engine, jobs.now_ms())


def forget_results(engine: Engine, retention_ms: int) -> None:
    """Finished jobs' files and logs past their retention (`storage.forget_results`)."""
    forgotten = storage.forget_results(engine, retention_ms, jobs.now_ms())
    if forgotten:
        log.info("deleted the results and logs of %d job(s) past their retention", forgotten)


def start_scheduler(
    engine: Engine, chain: Chain, settings: MarketSettings, batcher: Batcher | None
) -> BackgroundScheduler:
    """The scheduled work, started; `batcher` None leaves settlement to the parties."""
    scheduler = BackgroundScheduler(
        job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None}
    )
    every_s = settings.schedule_every_ms / 1000
    scheduler.add_job(expire_quotes, "interval", (engine, chain), seconds=every_s)
    scheduler.add_job(watch_deadlines, "interval", (engine, chain), seconds=every_s)
    scheduler.add_job(check_liveness, "interval", (engine, settings.online_ms), seconds=every_s)
    scheduler.add_job(forget_nonces, "interval", (engine,), seconds=every_s)
    retention = (engine, settings.result_retention_ms)
    scheduler.add_job(forget_results, "interval", retention, seconds=every_s)
    if batcher is not None:
        scheduler.add_job(batcher.run, "interval", seconds=settings.settle_every_ms / 1000)
    scheduler.start()
    return scheduler
