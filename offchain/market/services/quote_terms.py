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
from offchain.protocol.ledger.types import EscrowDatum
from offchain.protocol.tx import escrow as escrows
from offchain.protocol.tx.txbuild import datum_cbor

TERMS_TRIES = 100  # identical requests quoted within one tip read each take the next try


def escrow_terms(job: Job) -> str:
    """The digest of the escrow datum the job's quote asks for: equal terms, equal digest."""
    return terms_of(encoded(quoted_escrow(job)))


def encoded(datum: EscrowDatum) -> bytes:
    """The datum's bytes, as a lock's output carries them: encoded once per quote, they price
    its min-UTxO and make its escrow terms."""
    with suppress_type_checks():  # as the quote's other encodings (quotes.QUIET_CBOR)
        return datum_cbor(datum)


def terms_of(encoded: bytes) -> str:
    return hashlib.sha256(encoded).hexdigest()


def store(engine: Engine, nonce: PendingNonce, job: Job, events: Sequence[JobEvent]) -> None:
    """Spend the nonce and write the quoted job and its events in one transaction, with escrow
    terms no other job holds (the table's unique `escrow_terms` decides, whichever process
    quoted the other): the same request again within the tip's second gets a deadline one
    millisecond earlier, and so on until its terms differ (`fit_allowance` made the first)."""
    rows = [event.model_dump(exclude={"id"}) for event in events]
    job.escrow_terms = job.escrow_terms or escrow_terms(job)
    for _ in range(TERMS_TRIES):
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
            job.escrow_terms = escrow_terms(job)
    raise Conflict(f"{TERMS_TRIES} open quotes have this job's terms: ask again later", "spec")


def fit_allowance(chain: Chain, settings: MarketSettings, job: Job) -> EscrowDatum:
    """Set the job's fee allowance to its share of a settle fee (`settle_fee_share`: the
    measured cost of a settle alone, with a margin), and its lock to the whole job, that
    allowance and the return deposit (`escrows.lock_lovelace`: at least the ledger's minimum
    for the renter's refund output, refunded at any unit count). A settle then pays every
    party out of the escrow: no top-up, and no job is refused for being cheap. The escrow
    datum those terms make is returned, encoded once: its bytes price the lock's min-UTxO and
    their digest is the job's escrow terms."""
    job.fee_allowance = settings.settle_fee_share
    datum = quoted_escrow(job)
    cbor = encoded(datum)
    job.lock_lovelace = escrows.lock_lovelace(chain.context, chain.deployment, datum, cbor)
    job.escrow_terms = terms_of(cbor)
    return datum


def refund_deposit(job: Job) -> int:
    """What the job's lock holds beyond its price and its allowance (`fit_allowance`): it
    always comes back to the renter."""
    assert job.price_per_unit is not None and job.max_units is not None
    assert job.fee_allowance is not None and job.lock_lovelace is not None
    return job.lock_lovelace - lock_amount(job.price_per_unit, job.max_units, job.fee_allowance, 0)
