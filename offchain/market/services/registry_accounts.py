"""A renter's registry account for its private image, as the market carries it: sealed to the
quoted provider's key by the renter (`offchain.protocol.job.registry_seal`), kept with the job
and handed to that provider in its assignment. The market cannot open it, and no page, API
answer or log shows it."""

from __future__ import annotations

from sqlmodel import Session

from offchain.market.models import Job
from offchain.market.services import jobs
from offchain.protocol.job.job_state import JobState


def keep(session: Session, job: Job, sealed: str) -> None:
    """Keep the sealed account with a quoted job (its provider is known, nothing is locked
    yet); a later one replaces it. Conflict once the job is locked: its provider may have
    taken it already."""
    jobs.expect(job, JobState.QUOTED)
    job.registry_account = sealed
    session.add(job)
    session.commit()
