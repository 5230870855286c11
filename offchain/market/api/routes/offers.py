"""Offer search: the online offers, each exactly as its provider signed it."""

from __future__ import annotations

from fastapi import APIRouter

from offchain.market import schemas
from offchain.market.api.deps import SessionDep, SettingsDep
from offchain.market.services import jobs, offers, quotes

router = APIRouter(prefix="/offers", tags=["offers"])


@router.get("")
def online_offers(session: SessionDep, settings: SettingsDep) -> list[schemas.SignedOffer]:
    """Offers of providers heard from within the market's online window, cheapest first."""
    found = offers.online(session, jobs.now_ms() - settings.online_ms)
    return [quotes.signed_offer(offer) for offer, _ in found]
