"""The consumer's side of a job: a signed request becomes a quote, the quote becomes escrow
parameters or an unsigned lock transaction for the consumer's own wallet to sign, and a
reported escrow is checked on chain before the job counts as funded."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

from pycardano import Address, ChainContext, Transaction
from pycardano.exception import PyCardanoException
from sqlalchemy import Engine
from sqlmodel import Session, col, select
from typeguard import suppress_type_checks

from offchain.chain.ogmios import OgmiosError
from offchain.chain.submit import submit_sync
from offchain.chain.time import iso
from offchain.chain.utxo import format_out_ref, out_ref_of
from offchain.core.errors import UnchainedError
from offchain.market import schemas
from offchain.market.db import writing
from offchain.market.errors import Conflict, Invalid
from offchain.market.models import Blob, Cause, Job, JobState, Offer, Provider
from offchain.market.services import acceptance, image_pins, jobs, offers, quote_terms
from offchain.market.services.chain import Chain, escrow_problems, parse_ref, quoted_escrow
from offchain.market.services.nonces import PendingNonce
from offchain.market.settings import MarketSettings
from offchain.protocol.api import wire
from offchain.protocol.api.signed_request import SignedRequest
from offchain.protocol.checks.bond_check import covers_before
from offchain.protocol.job.jobspec import JobSpec
from offchain.protocol.ledger.amounts import ada
from offchain.protocol.ledger.payloads import verify
from offchain.protocol.tx import escrow as escrows
from offchain.protocol.tx.deployment import Deployment
from offchain.protocol.tx.txbuild import BuildError

TIP_AGE_S = 1.0  # a quote's chain time may come from a tip read this long ago (Chain.now_ms)


# QUIET_CBOR: the escrow datum of a quote is built here from validated fields, and encoding it
# (min-UTxO; its digest in `quote_terms.escrow_terms`) under pycardano's runtime type checks
# (typeguard) costs more than the encoding itself; the checks are off while it is encoded, as
# `txbuild.build` does.


def request_job(
    engine: Engine,
    settings: MarketSettings,
    chain: Chain,
    signed: SignedRequest,
    nonce: PendingNonce,
    request: schemas.JobRequest,
) -> wire.Quote:
    """Match a verified request to the cheapest online offer and quote it (its image pinned to
    a digest when it names a registry's tag: `image_pins`): the nonce, the job
    and its events are one write transaction (a replay changes nothing: ReplayedRequest),
    its escrow terms no other job's and its fee allowance what settling it may cost
    (`quote_terms`). When no offer can take the job, or its provider would refuse it once
    locked (`acceptance`: the check its daemon runs), only the nonce is spent and Conflict
    says why."""
    try:
        request = image_pins.pinned(settings, request)
        now = chain.now_ms(TIP_AGE_S)
        with Session(engine) as session:
            job, offer, owner = match(session, settings, chain.deployment, now, signed, request)
        with suppress_type_checks():  # QUIET_CBOR
            datum = quote_terms.fit_allowance(chain, settings, job)
            acceptance.refuse(chain, settings, job, offer, owner, request.spec, now, datum)
    except UnchainedError:
        with writing(engine), engine.begin() as connection:
            nonce.spend(connection)
        raise
    created = jobs.first_event(job, "signed job request")
    quoted = jobs.move(job, JobState.QUOTED, Cause.API, f"offer {offer.id}")
    quote_terms.store(engine, nonce, job, [created, quoted])
    return quote(job, offer, settings.settle_fee_share)


def match(
    session: Session,
    settings: MarketSettings,
    deployment: Deployment,
    chain_now_ms: int,
    signed: SignedRequest,
    request: schemas.JobRequest,
) -> tuple[Job, Offer, Provider]:
    """The job the request asks for, quoted on the cheapest online offer (not stored: the
    caller writes it), that offer and its provider; Conflict saying why when no offer can
    take it, or when bonds are required and no bond could back a job closing that late
    (`check_bonded_close`)."""
    consumer_vkey = signed.vkey.payload
    consumer_id = signed.key_hash
    consumer = Address.from_primitive(request.consumer_address)
    if consumer.payment_part is None or consumer.payment_part.payload.hex() != consumer_id:
        raise Invalid("the address's payment key is not the key that signed", "consumer_address")
    spec = request.spec
    expires = chain_now_ms + settings.quote_ttl_ms
    check_bonded_close(settings, deployment, chain_now_ms, expires + spec.max_duration_s * 1000)
    available = offers.available_now(settings)
    if request.exclude_providers:  # a failover: not the provider that let the job down
        excluded = frozenset(request.exclude_providers)
        available = dataclasses.replace(available, excluded=excluded)
    offer, provider = offers.best_offer(
        session, spec, request.gpu_model, available, request.min_delivered_percent
    )
    _, price = offers.quoted_bundle(offer, spec.resources)  # a fraction: its slice's price
    at = jobs.now_ms()
    job = Job(
        id=jobs.new_job_id(), consumer_vkey=consumer_vkey.hex(), consumer_id=consumer_id,
        consumer_address=request.consumer_address, spec=spec.canonical_json().decode(),
        spec_digest=spec.job_id().hex(),
        max_price=spec.max_price_lovelace, provider_id=provider.id, offer_id=offer.id,
        provider_vkey=provider.vkey, provider_address=provider.payout_address,
        gpu_model=offer.gpu_model, price_per_unit=price, max_units=spec.max_duration_s,
        deadline_ms=expires + spec.max_duration_s * 1000,
        start_deadline_ms=None if request.start_within_s is None
        else chain_now_ms + request.start_within_s * 1000,
        settle_window_ms=settings.settle_window_ms,
        quote_expires_ms=expires, created_at_ms=at, updated_at_ms=at,
    )  # fmt: skip
    return job, offer, provider


def check_bonded_close(
    settings: MarketSettings, deployment: Deployment, chain_now_ms: int, deadline_ms: int
) -> None:
    """Where offers match only with a counted bond, Conflict (naming the spec's
    max_duration_s) when the job's close outlasts what an active bond covers: its provider
    could withdraw before the consumer's slash (`bond_check.covers_before`)."""
    close = deadline_ms + settings.settle_window_ms
    covered = covers_before(deployment.notice_ms, deployment.refund_window_ms, None, chain_now_ms)
    if settings.min_bond_lovelace and close >= covered:
        raise Conflict(
            f"no bond can back this job: it closes at {iso(close)} and may be slashed for "
            f"{deployment.refund_window_ms} ms after that, while a bond's notice covers jobs "
            f"closing before {iso(covered)}; lower max_duration_s",
            "spec",
        )


def quote(job: Job, offer: Offer, settle_fee_share: int) -> wire.Quote:
    """The quote for `job`, with the provider's offer exactly as it was signed, and what its
    lock holds beyond the job: the fee allowance and the return deposit."""
    assert job.price_per_unit is not None and job.max_units is not None
    assert job.fee_allowance is not None
    deposit = quote_terms.refund_deposit(job)
    spec = JobSpec.model_validate(spec_of(job))
    return wire.Quote(
        job_id=job.id, state=job.state, offer=signed_offer(offer), gpu_model=offer.gpu_model,
        price_per_unit=job.price_per_unit, max_units=job.max_units,
        max_cost=job.price_per_unit * job.max_units, deadline_ms=job.deadline_ms,
        settle_window_ms=job.settle_window_ms, fee_allowance=job.fee_allowance,
        refund_deposit=deposit, lock_lovelace=job.lock_lovelace,
        quote_expires_ms=job.quote_expires_ms, settle_fee_share=settle_fee_share,
        fee_allowance_note=allowance_note(job.fee_allowance, deposit),
        image=spec_of(job)["image"], gpu_slice=offers.slice_for(offer.body, spec.resources),
    )  # fmt: skip


def allowance_note(allowance: int, deposit: int) -> str:
    """What the lock holds beyond the job, in words a renter reads before locking."""
    return (
        f"the fee allowance of {ada(allowance)} is not refunded: it pays this job's share of "
        f"the settle transaction's fee, and the settler keeps what is left; the return deposit "
        f"of {ada(deposit)} (the ledger's minimum for your refund output) always comes back "
        "with your refund, so no settlement ever needs a top-up"
    )


def signed_offer(offer: Offer) -> wire.SignedOffer:
    return wire.SignedOffer(
        id=offer.id, provider_id=offer.provider_id, body=offer.body, signature=offer.signature,
        key=offer.key, terms=json.loads(offer.body),
    )  # fmt: skip


def signed_offers(session: Session, ids: Sequence[int | None]) -> list[wire.SignedOffer]:
    """The offers `ids` as signed, in that order (a search's answer)."""
    rows = {row.id: row for row in session.exec(select(Offer).where(col(Offer.id).in_(ids)))}
    return [signed_offer(rows[offer_id]) for offer_id in ids]


def escrow_parameters(chain: Chain, job: Job) -> wire.EscrowParameters:
    """What the consumer locks: the datum's fields as `offchain.protocol.tx.escrow.new_escrow`
    takes them, and at least `lovelace`."""
    return wire.EscrowParameters(
        escrow_hash=chain.deployment.escrow_hash.payload.hex(),
        network_id=chain.deployment.network_id, consumer=job.consumer_address,
        provider=job.provider_address, provider_vkey=job.provider_vkey,
        price_per_unit=job.price_per_unit, max_units=job.max_units, deadline=job.deadline_ms,
        settle_window=job.settle_window_ms, job_id=job.spec_digest,
        fee_allowance=job.fee_allowance, lovelace=job.lock_lovelace,
        start_deadline=job.start_deadline_ms or 0,
    )  # fmt: skip


def report_escrow(session: Session, chain: Chain, job: Job, escrow: str) -> Job:
    """The consumer says it locked `escrow`: check the UTxO on chain against the quote, then
    the job is funded (without it, the chain follower funds the job once the escrow is
    `confirmations` deep). Reporting the same escrow again is a no-op."""
    waiting = (JobState.QUOTED, JobState.EXPIRED)
    if job.escrow_ref == escrow and job.state not in waiting:
        return job
    jobs.expect(job, *waiting)
    ref = parse_ref(escrow, "escrow")
    holder = jobs.by_escrow(session, ref)
    if holder is not None and holder.id != job.id:
        raise Conflict(f"escrow {escrow} already funds another job", "escrow")
    utxo = chain.utxo(ref)
    if utxo is None:
        raise Conflict(f"{escrow} is not an unspent output on chain (yet?)", "escrow")
    problems = escrow_problems(chain.deployment, job, utxo)
    if problems:
        raise Invalid(f"{escrow} is not the escrow quoted: " + "; ".join(problems), "escrow")
    job.escrow_ref = format_out_ref(ref)
    jobs.transition(session, job, JobState.FUNDED, Cause.API, f"escrow {escrow} checked on chain")
    session.commit()
    return job


def lock_transaction(
    session: Session, chain: Chain, job: Job, funds: ChainContext | None = None,
    payer: Address | None = None, field: str = "consumer_address",
) -> wire.LockTransaction:  # fmt: skip
    """The quoted escrow's lock, unsigned, spending from the consumer's address (its payment
    key signed the request, so its wallet can sign this), or from `payer` as `funds` answers
    for it (a browser wallet's UTxOs, `wallet_txs`); recorded as the one lock `submit_lock`
    will take for the job (a newer one replaces it)."""
    jobs.expect(job, JobState.QUOTED)
    consumer = payer or Address.from_primitive(job.consumer_address)
    assert job.lock_lovelace is not None  # a quoted job's
    try:
        datum = quoted_escrow(job)
        tx = escrows.lock(funds or chain.context, chain.deployment, consumer, datum,
                          job.lock_lovelace)  # fmt: skip
    except (BuildError, PyCardanoException) as exc:
        raise Conflict(f"cannot build the lock: {exc}", field) from exc
    job.lock_tx_id = tx.id.payload.hex()
    session.add(job)
    session.commit()
    output = tx.transaction_body.outputs[escrows.ESCROW_OUTPUT]
    return wire.LockTransaction(
        transaction=tx.to_cbor_hex(), tx_id=job.lock_tx_id, escrow=lock_ref(job.lock_tx_id),
        lovelace=output.amount.coin,
    )  # fmt: skip


def signers(tx: Transaction) -> set[str]:
    """The key hashes whose witnesses of `tx` verify over its id."""
    tx_id = tx.id.payload
    return {
        witness.vkey.hash().payload.hex()
        for witness in tx.transaction_witness_set.vkey_witnesses or []
        if verify(witness.vkey.payload, tx_id, witness.signature)
    }


def submit_lock(settings: MarketSettings, job: Job, signed: str) -> wire.Submitted:
    """Submit the consumer's signed lock if it is exactly the one built for the job (same
    body) and the consumer's key signed it; the chain follower funds the job once it is
    `confirmations` deep (or the consumer reports the escrow)."""
    jobs.expect(job, JobState.QUOTED, JobState.EXPIRED)
    if job.lock_tx_id is None:
        raise Conflict(f"no lock was built for job {job.id}: get it from its /lock", "transaction")
    try:
        tx = Transaction.from_cbor(bytes.fromhex(signed))
    except Exception as exc:  # pycardano raises several kinds for bytes of another shape
        raise Invalid(f"not a transaction: {exc}", "transaction") from exc
    tx_id = tx.id.payload
    if tx_id.hex() != job.lock_tx_id:
        raise Invalid(
            f"not the lock built for job {job.id} ({job.lock_tx_id}): sign it unchanged",
            "transaction",
        )
    if job.consumer_id not in signers(tx):
        raise Invalid("the lock is not signed by the consumer's payment key", "transaction")
    try:
        submit_sync(settings.ogmios_url, bytes.fromhex(signed))
    except OgmiosError as exc:
        raise Conflict(f"the chain refused the lock: {exc.message}", "transaction") from exc
    return wire.Submitted(tx_id=job.lock_tx_id, escrow=lock_ref(job.lock_tx_id))


def lock_ref(tx_id: str) -> str:
    """The escrow's `TXID#IX` a lock of id `tx_id` makes, for the JSON answer."""
    return format_out_ref(out_ref_of(tx_id, escrows.ESCROW_OUTPUT))


def spec_of(job: Job) -> dict[str, Any]:
    return json.loads(job.spec)


def public(session: Session, job: Job) -> wire.JobPublic:
    """What the job's parties see of it."""
    blob = session.get(Blob, job.result_sha256) if job.result_sha256 else None
    return wire.JobPublic(
        id=job.id, state=job.state, provider_id=job.provider_id, gpu_model=job.gpu_model,
        price_per_unit=job.price_per_unit, deadline_ms=job.deadline_ms, escrow=job.escrow_ref,
        receipt_units=job.receipt_units, result_sha256=job.result_sha256,
        result_size=blob.size if blob else None, exit_code=job.exit_code, outcome=job.outcome,
        failure_reason=job.failure_reason, settle_tx=job.settle_tx,
        created_at_ms=job.created_at_ms, updated_at_ms=job.updated_at_ms,
    )  # fmt: skip
