"""Providers, their signed offers, and matching a job against the offers online now.

An offer is kept exactly as signed (body, COSE_Sign1, COSE_Key), so a quote can embed it and
the consumer can check that the price came from the provider, not from the market.
"""

from __future__ import annotations

from collections.abc import Sequence

from pycardano import PaymentVerificationKey
from sqlmodel import Session, col, select

from offchain.market.errors import Conflict, NotFound
from offchain.market.models import Offer, Provider
from offchain.market.schemas import OfferTerms
from offchain.protocol.jobspec import JobSpec


def key_hash(vkey: bytes) -> str:
    """A party's id: the blake2b-224 hash of its payment key, as addresses carry it."""
    return PaymentVerificationKey(vkey).hash().payload.hex()


def provider(session: Session, provider_id: str) -> Provider:
    found = session.get(Provider, provider_id)
    if found is None:
        raise NotFound(f"no provider {provider_id}: post an offer first", "provider")
    return found


def heartbeat(session: Session, provider_id: str, at_ms: int) -> Provider:
    """Keep the provider's offers online until `at_ms` + the market's online window."""
    found = provider(session, provider_id)
    found.last_heartbeat_ms = at_ms
    session.add(found)
    session.commit()
    return found


def post_offer(
    session: Session,
    vkey: bytes,
    terms: OfferTerms,
    signed: tuple[str, str, str],
    at_ms: int,
    bond_lovelace: int | None = None,
) -> Offer:
    """Store a signed offer (body, signature, key); it replaces the provider's earlier offers
    of the same GPU model, and counts as a heartbeat."""
    provider_id = key_hash(vkey)
    record = session.get(Provider, provider_id) or Provider(
        id=provider_id, vkey=vkey.hex(), payout_address=terms.payout_address, last_heartbeat_ms=0
    )
    record.payout_address, record.last_heartbeat_ms = terms.payout_address, at_ms
    if terms.bond is not None:
        record.bond_ref, record.bond_lovelace = terms.bond, bond_lovelace
        record.bond_state = "unchecked" if bond_lovelace is None else "counted"
    session.add(record)
    earlier = select(Offer).where(
        Offer.provider_id == provider_id, Offer.gpu_model == terms.gpu_model, col(Offer.active)
    )
    for old in session.exec(earlier):
        old.active = False
        session.add(old)
    body, signature, key = signed
    offer = Offer(
        provider_id=provider_id, body=body, signature=signature, key=key,
        created_at_ms=at_ms, **terms.model_dump(exclude={"payout_address", "bond"}),
    )  # fmt: skip
    session.add(offer)
    session.commit()
    return offer


def online(session: Session, since_ms: int) -> Sequence[tuple[Offer, Provider]]:
    """Active offers of providers heard from at or after `since_ms`."""
    query = (
        select(Offer, Provider)
        .join(Provider, col(Offer.provider_id) == col(Provider.id))
        .where(col(Offer.active), col(Provider.last_heartbeat_ms) >= since_ms)
    )
    return session.exec(query).all()


def matching(
    session: Session, spec: JobSpec, gpu_model: str | None, since_ms: int
) -> Sequence[tuple[Offer, Provider]]:
    """Online offers whose bundle holds the spec's and whose price over the job's longest run
    stays within its max price, cheapest first (then the freshest provider)."""
    wanted = spec.resources
    query = (
        select(Offer, Provider)
        .join(Provider, col(Offer.provider_id) == col(Provider.id))
        .where(
            col(Offer.active),
            col(Provider.last_heartbeat_ms) >= since_ms,
            col(Offer.gpu_count) >= wanted.gpus,
            col(Offer.vram_mib) >= wanted.min_vram_mib,
            col(Offer.cpu_cores) >= wanted.cpu_cores,
            col(Offer.memory_mib) >= wanted.memory_mib,
            col(Offer.disk_mib) >= wanted.disk_mib,
            col(Offer.price_per_unit) * spec.max_duration_s <= spec.max_price_lovelace,
        )
        .order_by(col(Offer.price_per_unit), col(Provider.last_heartbeat_ms).desc())
    )
    if gpu_model is not None:
        query = query.where(Offer.gpu_model == gpu_model)
    return session.exec(query).all()


def best_offer(
    session: Session, spec: JobSpec, gpu_model: str | None, since_ms: int
) -> tuple[Offer, Provider]:
    """The cheapest online offer that can take the job; Conflict saying why when none can."""
    found = matching(session, spec, gpu_model, since_ms)
    if not found:
        raise Conflict(no_match_reasons(session, spec, gpu_model, since_ms), "spec")
    return found[0]


def no_match_reasons(session: Session, spec: JobSpec, gpu_model: str | None, since_ms: int) -> str:
    """Why no offer matches, counted per requirement."""
    return "no online offer meets every requirement of the job"
