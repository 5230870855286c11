"""What makes a quote's escrow terms safe to lock: terms no other job has, so a lock funds
exactly the job it was built for, and payouts its fee allowance can raise to the ledger's
minimum UTxO whatever the receipt says, so no settler pays from its own funds."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from sqlalchemy import Engine, insert
from sqlalchemy.exc import IntegrityError

from offchain.market.db import writing
from offchain.market.errors import Conflict
from offchain.market.models import Job, JobEvent
from offchain.market.services.chain import Chain, quoted_escrow
from offchain.market.services.nonces import PendingNonce
from offchain.market.settings import MarketSettings
from offchain.protocol import escrow as escrows

TERMS_TRIES = 100  # identical requests quoted within one tip read each take the next try


def escrow_terms(job: Job) -> str:
    """The digest of the escrow datum the job's quote asks for: equal terms, equal digest."""
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
            job.deadline_ms -= 1
    raise Conflict(f"{TERMS_TRIES} open quotes have this job's terms: ask again later", "spec")


def refuse_subsidy(chain: Chain, settings: MarketSettings, job: Job) -> None:
    """Conflict, in the renter's terms, when a receipt for some unit count (0..max units) would
    leave a payout below the ledger's minimum UTxO by more than the fee allowance covers after
    the settle fee's share: the worst case of both top-ups, for the payouts' real outputs."""
    context, deployment = chain.context, chain.deployment
    datum = quoted_escrow(job)
    locked = escrows.escrow_output(context, deployment, datum, job.lock_lovelace).amount.coin
    worst = escrows.worst_topup(context, deployment, datum, locked)
    room = job.fee_allowance - settings.settle_fee_share
    if worst > room:
        raise Conflict(
            f"at {job.price_per_unit} lovelace per second for up to {job.max_units} s, a "
            "settlement can owe you or the provider less than the ledger's minimum output: "
            f"topping the payouts up could take {worst} lovelace, more than the {room} that "
            f"the fee allowance of {job.fee_allowance} leaves after the settle fee, and no "
            "settler pays it from its own funds; ask for a longer job or a dearer GPU",
            "spec",
        )
