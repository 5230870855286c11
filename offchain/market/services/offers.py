"""Providers, their signed offers, and which offers can take a job now.

An offer is kept exactly as signed (body, COSE_Sign1, COSE_Key), so a quote can embed it and
the consumer can check that the price came from the provider, not from the market.

An offer can take a job when its provider is online (a fresh heartbeat), its bond counts and
is at or above the market's minimum (when the market asks for one), and one of its slots is
free: a slot is taken by each of the provider's accepted or running jobs on that GPU model, so
the market never promises what the provider offered twice. An offer's GPU slices (`gpu_slices`,
read from its signed body: no column holds them) are searched as records of their own when a
job asks a fraction of a GPU or a query names one; a job asking a fraction (its spec names
gpu_sm_percent) takes one of the offer's slices, any other job one of its whole slots. The
search language (`offer_query`) decides which of those meet a job or a query, and says why
when none does.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any

from pycardano import Address, PaymentVerificationKey
from sqlalchemy import ColumnElement, Select, Subquery, and_, bindparam, case, func, or_
from sqlmodel import Session, col, select
from sqlmodel.sql.expression import Select as ModelSelect

from offchain.market import db
from offchain.market.errors import Conflict, Invalid
from offchain.market.models import Job, JobState, Offer, Provider, ProviderReputation
from offchain.market.offer_query import OfferQuery, OfferRecord, Search
from offchain.market.schemas import OfferTerms
from offchain.market.services import jobs, offer_images
from offchain.market.services.chain import Chain, parse_ref
from offchain.market.settings import MarketSettings
from offchain.protocol.checks.bond_check import BondRefused, check_bond
from offchain.protocol.job.gpu_slices import SliceTerms, cheapest_fit
from offchain.protocol.job.jobspec import JobSpec, Resources
from offchain.protocol.ledger.types import Just

BUSY = (JobState.ACCEPTED, JobState.RUNNING)  # the states that hold one of a provider's slots
ACTIVE_BOND = "active"  # as the chain follower names a bond that is not unbonding
LIKELY = 32  # the cheapest offers a quote reads before it reads them all
JUDGED = (col(ProviderReputation.delivered) + col(ProviderReputation.failed)
          + col(ProviderReputation.refunded))  # fmt: skip
# a provider's delivered share in whole percent (floored: "/" is a true division), -1 before
# its first job
DELIVERED_PERCENT = case((JUDGED > 0, col(ProviderReputation.delivered) * 100 // JUDGED), else_=-1)


def key_hash(vkey: bytes) -> str:
    """A party's id: the blake2b-224 hash of its payment key, as addresses carry it."""
    return PaymentVerificationKey(vkey).hash().payload.hex()


def provider(session: Session, provider_id: str) -> Provider:
    missing = f"no provider {provider_id}: post an offer first"
    return db.found(session, Provider, provider_id, missing, "provider")


def heartbeat(session: Session, provider_id: str, at_ms: int) -> Provider:
    """Keep the provider's offers online until `at_ms` + the market's online window."""
    found = provider(session, provider_id)
    found.last_heartbeat_ms = at_ms
    session.add(found)
    session.commit()
    return found


@dataclasses.dataclass(frozen=True)
class CountedBond:
    """A bond an offer names that passed the bond check: its lovelace and whether it is
    unbonding (the follower's names for the states, which it keeps up to date from then on)."""

    lovelace: int
    state: str


def counted_bond(
    chain: Chain, settings: MarketSettings, vkey: bytes, terms: OfferTerms
) -> CountedBond | None:
    """The bond `terms` names (None when it names none), if it counts as this provider's bond:
    on chain now, for its key and payout address, at least the market's minimum, and not
    withdrawable before a job quoted now could close; Invalid naming `bond` with the bond
    check's reason otherwise."""
    if terms.bond is None:
        return None
    utxo = chain.utxo(parse_ref(terms.bond, "bond"))
    if utxo is None:
        raise Invalid(f"bond {terms.bond} is not an unspent output on chain", "bond")
    payout = Address.from_primitive(terms.payout_address)
    now = chain.now_ms()
    soonest_close = now + settings.quote_ttl_ms + settings.settle_window_ms
    least = settings.min_bond_lovelace
    try:
        datum = check_bond(chain.deployment, utxo, vkey, payout, least, soonest_close, now)
    except BondRefused as exc:
        raise Invalid(str(exc), "bond") from exc
    unbonding = isinstance(datum.unbonding_since, Just)
    return CountedBond(utxo.output.amount.coin, "unbonding" if unbonding else ACTIVE_BOND)


def post_offer(
    session: Session,
    vkey: bytes,
    terms: OfferTerms,
    signed: tuple[str, str, str],
    at_ms: int,
    bond: CountedBond | None = None,
) -> Offer:
    """Store a signed offer (body, signature, key) and the bond it names, checked
    (`counted_bond`); it replaces the provider's earlier offers of the same GPU model, and
    counts as a heartbeat."""
    provider_id = key_hash(vkey)
    record = session.get(Provider, provider_id) or Provider(
        id=provider_id, vkey=vkey.hex(), payout_address=terms.payout_address, last_heartbeat_ms=0
    )
    record.payout_address, record.last_heartbeat_ms = terms.payout_address, at_ms
    if bond is not None:
        record.bond_ref, record.bond_lovelace = terms.bond, bond.lovelace
        record.bond_state = bond.state
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


SLICE_ATTRS = ("gpu_memory_mib", "gpu_sm_percent", "isolation")  # from the body, not columns
TERMS = tuple(f.name for f in dataclasses.fields(OfferRecord)
              if f.name not in ("online", "away", "delivered_percent", *SLICE_ATTRS))  # fmt: skip
# a job asking a fraction: its canonical spec has "gpu_sm_percent":N (N from 1; a string
# value, an env variable's, is quoted, so no other spec has this)
SLICED = or_(*(col(Job.spec).contains(f'"gpu_sm_percent":{digit}', autoescape=True)
               for digit in "123456789"))  # fmt: skip


def slice_terms(body: str) -> list[SliceTerms]:
    """The GPU slices a stored offer's body lists (checked when it was posted)."""
    entries = json.loads(body).get("gpu_slices", [])
    return [SliceTerms.model_validate(entry) for entry in entries]


def slice_for(body: str, wanted: Resources) -> SliceTerms | None:
    """The cheapest of the offer's slices that gives the fraction `wanted` asks (None: it
    asks none, or no slice is that large)."""
    return cheapest_fit(slice_terms(body), wanted.fraction)


def quoted_bundle(offer: Offer, wanted: Resources) -> tuple[Resources, int]:
    """What a job asking `wanted` gets on `offer` and its price per second: the cheapest
    slice that holds its fraction, else the offer's whole bundle."""
    bundle = Resources.model_construct(
        gpus=offer.gpu_count, min_vram_mib=offer.vram_mib, cpu_cores=offer.cpu_cores,
        memory_mib=offer.memory_mib, disk_mib=offer.disk_mib, gpu_memory_mib=0, gpu_sm_percent=0,
    )  # fmt: skip
    piece = slice_for(offer.body, wanted)
    if piece is None:
        return bundle, offer.price_per_unit
    update = {"gpus": 0, "min_vram_mib": 0, "gpu_memory_mib": piece.memory_mib,
              "gpu_sm_percent": piece.sm_percent}  # fmt: skip
    return bundle.model_copy(update=update), piece.price_per_unit


@dataclasses.dataclass(frozen=True)
class Availability:
    """What an offer needs beyond its terms to take a job now."""

    since_ms: int  # the oldest heartbeat that keeps a provider online
    min_bond_lovelace: int  # 0: no bond needed
    excluded: frozenset[str] = frozenset()  # providers the renter will not have (failover)

    def away(self, offer: Mapping[str, Any]) -> str | None:
        """Why the offer (a `records` row) can take no job now, counted as is ("2 busy");
        None when it can."""
        if offer["provider_id"] in self.excluded:
            return "excluded by the renter"
        if offer["last_heartbeat_ms"] < self.since_ms:
            return "offline"
        least, bonded = self.min_bond_lovelace, offer["bond_state"] == ACTIVE_BOND
        if least and not (bonded and (offer["bond_lovelace"] or 0) >= least):
            return f"without a counted bond of at least {least} lovelace"
        if offer["busy"] >= offer["slots"]:
            return "busy"
        return None


def available_now(settings: MarketSettings) -> Availability:
    """The settings' rules, online meaning heard from within the online window until now."""
    return Availability(jobs.now_ms() - settings.online_ms, settings.min_bond_lovelace)


def records(
    session: Session,
    availability: Availability,
    where: Sequence[ColumnElement[bool]] = (),
    limit: int | None = None,
    slices: bool = False,
) -> list[OfferRecord]:
    """Active offers as the search sees them (the columns only: a quote may read every
    offer), freshest provider first; with `limit`, the cheapest `limit` of those meeting
    `where`, in the order a job's search sorts them (price, then freshest). With `slices`,
    each offer's GPU slices follow it as records of their own (its body is read then)."""
    query = records_query(where, cheapest=limit is not None, slices=slices).limit(limit)
    return read_records(session, query, {}, availability, slices)


def records_query(
    where: Sequence[ColumnElement[bool]], cheapest: bool, slices: bool, bodies: bool = False
) -> Select[Any]:
    """`records`' statement: active offers meeting `where`, with what holds their slots
    (`busy`), freshest provider first or, `cheapest`, by price first; each offer's body too
    where `slices` or `bodies` needs it."""
    busy = _busy()
    same = and_(busy.c.provider_id == Offer.provider_id, busy.c.gpu_model == Offer.gpu_model)
    sliced = func.coalesce(busy.c.sliced, 0)
    columns = [getattr(Offer, name) for name in TERMS] + [
        Offer.slots, Provider.last_heartbeat_ms, Provider.bond_state, Provider.bond_lovelace,
        (func.coalesce(busy.c.jobs, 0) - sliced).label("busy"), sliced.label("sliced"),
        DELIVERED_PERCENT.label("delivered_percent"), *([Offer.body] if slices or bodies else []),
    ]  # fmt: skip
    order = [col(Provider.last_heartbeat_ms).desc(), col(Offer.id)]
    first = [col(Offer.price_per_unit), DELIVERED_PERCENT.desc()] if cheapest else []
    return (
        select(*columns)
        .join(Provider, col(Offer.provider_id) == col(Provider.id))
        .outerjoin(busy, same)
        .outerjoin(ProviderReputation, col(ProviderReputation.provider_id) == Offer.provider_id)
        .where(col(Offer.active), *where)
        .order_by(*first, *order)
    )


@functools.cache
def _busy() -> Subquery:
    """Each provider's jobs holding a slot, per GPU model, and how many of them hold a slice
    (one subquery for every statement: it has no parameter of its own)."""
    return (
        select(Job.provider_id, Job.gpu_model, func.count().label("jobs"),
               func.sum(case((SLICED, 1), else_=0)).label("sliced"))
        .where(col(Job.state).in_(BUSY))
        .group_by(col(Job.provider_id), col(Job.gpu_model))
        .subquery()
    )  # fmt: skip


def read_records(
    session: Session, query: Select[Any], params: Mapping[str, Any], availability: Availability,
    slices: bool, bodies: dict[int | None, str] | None = None,
) -> list[OfferRecord]:  # fmt: skip
    """The rows of a `records_query` as search records (a core read: no ORM objects); each
    offer's body kept in `bodies` where given."""
    found = []
    for row in session.connection().execute(query, dict(params)):
        offer = row._asdict()
        if bodies is not None:
            bodies[offer["id"]] = offer["body"]
        away = availability.away(offer)
        terms = {name: offer[name] for name in TERMS}
        whole = OfferRecord(**terms, online=away is None, away=away or "",
                            delivered_percent=offer["delivered_percent"])  # fmt: skip
        found.append(whole)
        if slices:
            found += slice_records(whole, offer, availability)
    return found


def slice_records(
    whole: OfferRecord, offer: Mapping[str, Any], availability: Availability
) -> list[OfferRecord]:
    """The offer's GPU slices as records: each entry's slice and price, online while any of
    its slices is free (the provider's jobs asking a fraction hold one each)."""
    entries = slice_terms(offer["body"])
    held = {**offer, "busy": offer["sliced"], "slots": sum(entry.count for entry in entries)}
    away = availability.away(held)
    return [
        dataclasses.replace(
            whole, gpu_count=0, vram_mib=0, price_per_unit=entry.price_per_unit,
            gpu_memory_mib=entry.memory_mib, gpu_sm_percent=entry.sm_percent,
            isolation=entry.isolation, online=away is None, away=away or "",
        )
        for entry in entries
    ]  # fmt: skip


@functools.cache
def _likely_query() -> Select[Any]:
    """The cheapest offers that could take a job (`could_take` binds its values): built once,
    as its SQL is compiled once, rather than per quote."""
    image = or_(col(Offer.body).contains(bindparam("image"), escape=offer_images.ESCAPE),
                col(Offer.body).contains(offer_images.PULLS))  # fmt: skip
    could = [
        col(Offer.gpu_count) >= bindparam("gpus"),
        col(Offer.vram_mib) >= bindparam("vram_mib"),
        col(Offer.cpu_cores) >= bindparam("cpu_cores"),
        col(Offer.memory_mib) >= bindparam("memory_mib"),
        col(Offer.disk_mib) >= bindparam("disk_mib"),
        col(Offer.price_per_unit) * bindparam("max_units") <= bindparam("max_price"),
        col(Provider.last_heartbeat_ms) >= bindparam("since_ms"),
        bindparam("min_delivered") <= DELIVERED_PERCENT,
        image,
    ]
    return records_query(could, cheapest=True, slices=False, bodies=True).limit(bindparam("limit"))


def could_take(
    spec: JobSpec, availability: Availability, min_delivered: int | None = None
) -> dict[str, int | str]:
    """What any offer that can take `spec` has (necessary, not sufficient: the search decides),
    as `_likely_query`'s parameters: the bundle, a price within the job's max, a fresh
    heartbeat, the record asked for, and its image named (or pulling)."""
    wanted = spec.resources
    return {
        "gpus": wanted.gpus, "vram_mib": wanted.min_vram_mib, "cpu_cores": wanted.cpu_cores,
        "memory_mib": wanted.memory_mib, "disk_mib": wanted.disk_mib,
        "max_units": spec.max_duration_s, "max_price": spec.max_price_lovelace,
        "since_ms": availability.since_ms, "image": offer_images.named(spec.image),
        "min_delivered": -1 if min_delivered is None else min_delivered, "limit": LIKELY,
    }  # fmt: skip


def likely(
    session: Session, spec: JobSpec, availability: Availability, min_delivered: int | None
) -> tuple[list[OfferRecord], dict[int | None, str]]:
    """The cheapest LIKELY offers that could take `spec`, in a job's search order, and their
    bodies by id (read in the same statement: the image check reads them next)."""
    bodies: dict[int | None, str] = {}
    params = could_take(spec, availability, min_delivered)
    return read_records(session, _likely_query(), params, availability, False, bodies), bodies


@functools.cache
def _chosen_query() -> ModelSelect[Offer, Provider]:
    """The chosen offer and its provider as ORM rows (built once, its id bound)."""
    return select(Offer, Provider).join(Provider).where(Offer.id == bindparam("id"))


def search(session: Session, query: OfferQuery, availability: Availability) -> Search:
    """The offers that meet `query` and can take a job now, in its order; with the counts
    that say why when none does."""
    return query.search(records(session, availability, slices=query.slices))


def best_offer(
    session: Session,
    spec: JobSpec,
    gpu_model: str | None,
    availability: Availability,
    min_delivered: int | None = None,
) -> tuple[Offer, Provider]:
    """The cheapest offer (then the best record, then the freshest provider) that can take
    the job now, from a provider that delivered at least `min_delivered` percent; Conflict
    saying why, counted per requirement, when none can.

    The search runs first over the cheapest few offers that could take the job (read in its
    own order, so the first match there is the first match of all), and over every offer
    only when none of those can (busy, bond, image) or to count why nothing can. Of those
    that meet the query, the first whose offer has the job's image (or pulls) is chosen."""
    query = OfferQuery.for_job(spec, gpu_model, min_delivered)
    first = None  # a fraction's price is its slice's, no column's: every offer is read
    if not query.slices:
        cheapest, bodies = likely(session, spec, availability, min_delivered)
        matched = query.search(cheapest).offers
        first, _ = offer_images.first_running(session, matched, spec.image, bodies)
    if first is None:
        found = search(session, query, availability)
        if not found.offers:
            raise Conflict(f"no offer can take the job: {found.why_none()}", "spec")
        first, offered = offer_images.first_running(session, found.offers, spec.image)
        if first is None:
            raise offer_images.no_image(spec.image, offered, len(found.offers))
    chosen = session.exec(_chosen_query(), params={"id": first.id})
    offer, owner = chosen.one()  # read in this session a moment ago
    return offer, owner
