"""What makes a quote's escrow terms safe to lock: terms no other job has, so a lock funds
exactly the job it was built for, and a lock that pays the whole job, the settle fee's share
and the return deposit of the renter's refund, so no settlement needs anyone's own funds."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from sqlalchemy import Engine, insert
from sqlalchemy.exc import IntegrityError
from typeguard import suppress_type_checks

from offchain.market.db import writing
from offchain.market.errors import Conflict
from offchain.market.models import Job, JobEvent
from offchain.market.services.chain import Chain, quoted_escrow
from offchain.market.services.nonces import PendingNonce
from offchain.market.settings import MarketSettings
from offchain.protocol.ledger.split import lock_amount
from offchain.protocol.tx import escrow as escrows

TERMS_TRIES = 100  # identical requests quoted within one tip read each take the next try


def escrow_terms(job: Job) -> str:
    """The digest of the escrow datum the job's quote asks for: equal terms, equal digest."""
    with suppress_type_checks():  # as the quote's other encodings (quotes.QUIET_CBOR)
        return hashlib.sha256(quoted_escrow(job).to_cbor()).hexdigest()


def store(engine: Engine, nonce: PendingNonce, job: Job, events: Sequence[JobEvent]) -> None:
    """Spend the nonce and write the quoted job and its events in one transaction, with escrow
    terms no other job holds (the table's unique `escrow_terms` decides, whichever process
    quoted the other): the same request again within the tip's second gets a deadline one
    millisecond earlier, and so on until its terms differ."""
    rows = [event.model_dump(exclude={"id"}) for event in events]
    for _ in range(TERMS_TRIES):
        job.escrow_terms = escrow_terms(job)
        try:
            with writing(engine), engine.begin() as connection:
                nonce.spend(connection)
                connection.execute(insert(Job), [job.model_dump()])
                connection.execute(insert(JobEvent), rows)
            return
        except IntegrityError as exc:
            if "escrow_terms" not in str(exc.orig):
                raise
            assert job.deadline_ms is not None  # `match` set it
            job.deadline_ms -= 1
    raise Conflict(f"{TERMS_TRIES} open quotes have this job's terms: ask again later", "spec")


def fit_allowance(chain: Chain, settings: MarketSettings, job: Job) -> None:
    """Set the job's fee allowance to its share of a settle fee (`settle_fee_share`: the
    measured cost of a settle alone, with a margin), and its lock to the whole job, that
    allowance and the return deposit (`escrows.lock_lovelace`: at least the ledger's minimum
    for the renter's refund output, refunded at any unit count). A settle then pays every
    party out of the escrow: no top-up, and no job is refused for being cheap."""
    job.fee_allowance = settings.settle_fee_share
    job.lock_lovelace = escrows.lock_lovelace(chain.context, chain.deployment, quoted_escrow(job))


def refund_deposit(job: Job) -> int:
    """What the job's lock holds beyond its price and its allowance (`fit_allowance`): it
    always comes back to the renter."""
    assert job.price_per_unit is not None and job.max_units is not None
    assert job.fee_allowance is not None and job.lock_lovelace is not None
    return job.lock_lovelace - lock_amount(job.price_per_unit, job.max_units, job.fee_allowance, 0)
