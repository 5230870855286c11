"""Routing a deployment (an endpoint or a pod) client side: which provider runs it and which
channel pays. The market only lists offers; the renter talks to the chosen provider's gateway
directly, so its payloads never pass through the market.

`choose_offers` searches the market's online offers and keeps those whose signed terms take
the spec (a gateway, the bundle, prices not below the provider's), ordered: those that have
the spec's image already (no pull: a faster cold start), then the price per second; the best
of as many distinct providers as asked (an endpoint with `providers: 2` runs on two). Each
offer's signature is checked and its terms read from the signed body, so the market cannot swap
a gateway's address. `channel_for` reuses an open channel of this
renter to that provider with enough left, or opens one. `pinned_spec` pins an image named by a
registry tag to the digest the registry serves now, so what is signed, deployed and paid for is
that exact image (a provider pulls by digest and checks it)."""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from consumer.sdk.errors import ConsumerError
from offchain.protocol.ledger.amounts import ada

if TYPE_CHECKING:
    from pydantic import BaseModel

    from consumer.sdk.channel_store import ChannelRecord
    from consumer.sdk.channels import Channels
    from consumer.sdk.market_read import MarketReader


class _Imaged(Protocol):
    image: str

    def model_copy(self: SpecT, *, update: dict[str, Any]) -> SpecT: ...


SpecT = TypeVar("SpecT", bound=_Imaged)
OFFERS_SEARCHED = 200
CLOSE_PERIOD_MS = 3_600_000  # the providers' default least close period


def pinned_spec(spec: SpecT) -> SpecT:
    """`spec` with its image pinned to its registry's digest (RegistryError if the registry
    cannot say); an image without a registry host (a provider's local one) as it is."""
    from offchain.protocol.job.registry import pinned

    image = pinned(spec.image)
    return spec if image == spec.image else spec.model_copy(update={"image": image})


@dataclasses.dataclass(frozen=True)
class RoutedOffer:
    """An offer chosen for a spec: its provider and its signed terms."""

    provider_id: str
    gateway_url: str
    terms: dict[str, Any]


def refusal(terms: dict[str, Any], spec: BaseModel) -> str | None:
    """Why the offer's `terms` would not take `spec` (its gateway refuses the same), or None."""
    if not terms.get("gateway_url"):
        return "no gateway"
    resources = getattr(spec, "resources")  # noqa: B009 - every deployable spec has one
    wanted = {"gpu_count": resources.gpus, "vram_mib": resources.min_vram_mib,
              "cpu_cores": resources.cpu_cores, "memory_mib": resources.memory_mib}  # fmt: skip
    for field, asked in wanted.items():
        if asked > int(terms.get(field, 0)):
            return f"{field} {terms.get(field, 0)} < {asked}"
    per_request = getattr(spec, "price_per_request", 0)
    per_second = getattr(spec, "price_per_second", 0)
    if per_request and (terms.get("request_price") is None or
                        per_request < terms["request_price"]):  # fmt: skip
        return f"request price {terms.get('request_price')}"
    if getattr(spec, "kind", "") == "llm":
        floors = terms.get("token_prices")
        asked = [getattr(spec, f"price_per_{way}_token") for way in ("input", "output")]
        if floors is None or any(a < int(f) for a, f in zip(asked, floors, strict=True)):
            return f"token prices {floors}"
    least = int(terms["price_per_unit"]) * getattr(spec, "replicas", 1)
    if per_second and per_second < least:
        return f"price per second {least}"
    return None


def has_image(terms: dict[str, Any], image: str) -> bool:
    """Whether the offer lists `image` (a reference, or its digest) among its cached ones."""
    return any(image in (item.get("reference"), item.get("digest"))
               for item in terms.get("images") or [])  # fmt: skip


def choose_offer(market: MarketReader, spec: BaseModel, market_identity: str) -> RoutedOffer:
    """The best online offer for `spec`; ConsumerError when none takes it."""
    return choose_offers(market, spec, market_identity, 1)[0]


def choose_offers(
    market: MarketReader, spec: BaseModel, market_identity: str, count: int
) -> list[RoutedOffer]:
    """The best online offers for `spec` of `count` distinct providers, best first;
    ConsumerError when fewer take it."""
    from consumer.sdk.quote import offer_signer
    from offchain.protocol.api.wire import SignedOffer

    found = market.search_offers("", OFFERS_SEARCHED)["offers"]
    fitting: list[tuple[tuple[int, int, int], RoutedOffer]] = []
    reasons: list[str] = []
    for item in found:
        offer = SignedOffer.model_validate(item)
        terms = json.loads(offer.body)  # what the provider signed, not what the market says
        why = refusal(terms, spec)
        if why is not None:
            reasons.append(f"{offer.provider_id[:8]}: {why}")
            continue
        offer_signer(offer, market_identity)  # QuoteRejected unless the provider signed it
        image = str(getattr(spec, "image", ""))
        rank = (0, 0 if has_image(terms, image) else 1, int(terms["price_per_unit"]))
        fitting.append((rank, RoutedOffer(offer.provider_id, terms["gateway_url"], terms)))
    chosen: dict[str, RoutedOffer] = {}
    for _, routed in sorted(fitting, key=lambda ranked: ranked[0]):
        chosen.setdefault(routed.provider_id, routed)
    if len(chosen) < count:
        taken = f"{len(chosen)} provider(s) take" if chosen else "no online offer takes"
        raise ConsumerError(
            f"{taken} this spec, {count} asked for ({len(found)} offers searched"
            + (f": {'; '.join(reasons[:5])}" if reasons else "") + ")",
            searched=len(found), providers=len(chosen),
        )  # fmt: skip
    return list(chosen.values())[:count]


async def channel_for(
    channels: Channels, offer: RoutedOffer, deposit: int, market: MarketReader,
    market_identity: str,
) -> ChannelRecord:  # fmt: skip
    """An open channel of this renter to the offer's provider with at least `deposit` not
    signed away yet, or a new one of `deposit`."""
    import asyncio

    from consumer.sdk.channels import find_provider

    for record in channels.store.all():
        if record.provider_id != offer.provider_id or record.closed_tx_id:
            continue
        try:
            status = await asyncio.to_thread(channels.status, record.channel_id)
        except ConsumerError:
            continue
        if status.state == "open" and status.left >= deposit:
            return record
    provider = find_provider(market, offer.provider_id, market_identity, channels.key.network)
    if deposit <= 0:
        raise ConsumerError(f"--deposit: {ada(deposit)} opens no channel", field="--deposit")
    record, _ = await channels.open(provider, deposit, CLOSE_PERIOD_MS)
    return record
