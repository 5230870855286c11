"""Offer search: the offers that can take a job now, each exactly as its provider signed it."""

from __future__ import annotations

import dataclasses
from typing import Annotated

from fastapi import APIRouter, Depends, Query

from offchain.market import offer_query
from offchain.market.api.deps import SessionDep, SettingsDep, storable_params
from offchain.market.services import offers, quotes, reputation
from offchain.protocol.api import wire

router = APIRouter(prefix="/offers", tags=["offers"], dependencies=[Depends(storable_params)])


@router.get("")
def search_offers(
    session: SessionDep,
    settings: SettingsDep,
    query: Annotated[str, Query(max_length=4096, description=offer_query.__doc__ or "")] = "",
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> wire.OfferSearch:
    """Offers that meet every term of `query` and can take a job now (provider online, bond
    counted, a slot free), e.g. `gpu_model=RTX_4090 vram>=24GiB gpus>=2 price<=2ADA/h
    sort=price,-vram`; cheapest first unless it sorts. A term that cannot be read is a 422
    naming it; when nothing matches, `why_none` says why, counted per term."""
    parsed = offer_query.OfferQuery.parse(query)
    found = offers.search(session, parsed, offers.available_now(settings))
    shown = found.offers[:limit]
    records = reputation.of(session, sorted({record.provider_id for record in shown}))
    return wire.OfferSearch(
        offers=quotes.signed_offers(session, [record.id for record in shown]),
        matched=len(found.offers), total=found.total, why_none=found.why_none(),
        records={p: wire.ProviderRecord(**dataclasses.asdict(r),
                                        delivered_percent=r.delivered_percent)
                 for p, r in records.items()},
    )  # fmt: skip
