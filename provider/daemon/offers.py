"""The daemon's offer on the market: one slot's bundle at its price, signed with the provider
key (GPU UUIDs stay private: the market sees the model, the count and the memory), kept online
by heartbeats and published again after any outage (the market may have forgotten it). Each
publication carries the latest `unchained provider selftest` summary saved in the state
directory, if any."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from offchain.protocol.api.market_errors import MarketError, MarketRefused
from offchain.protocol.api.market_link import Body, MarketLink
from offchain.protocol.job.gpu_slices import MAX_FAULT_NOTE, SliceOffer, SliceSelfTest
from offchain.protocol.job.offer import OfferedImage, SelfTestSummary
from offchain.protocol.ledger.amounts import ada
from provider.capacity import Bundle
from provider.daemon.bond import BondView
from provider.selftest.checks import load_summary

log = logging.getLogger("unchained.provider")
NOT_FOUND = 404


def offer_terms(
    bundle: Bundle, payout_address: str, bond: BondView, selftest: SelfTestSummary | None = None,
    images: list[OfferedImage] | None = None, pulls: bool = False,
    gateway: GatewayTerms | None = None, slice_tests: SliceTests | None = None,
) -> dict[str, Any]:  # fmt: skip
    """The offer's terms as the market's POST /offers reads them: `images` on this machine
    (None: the offer says nothing of images), whether it `pulls` others, where its gateway
    takes deployments (None: it takes none), and its GPU slices, each with the latest
    self-test of such a slice in `slice_tests` (by `slice_key`; none: not measured)."""
    resources = bundle.resources
    terms: dict[str, Any] = {
        "payout_address": payout_address,
        "gpu_model": bundle.gpu_model,
        "gpu_count": resources.gpus,
        "vram_mib": resources.min_vram_mib,
        "cpu_cores": resources.cpu_cores,
        "memory_mib": resources.memory_mib,
        "disk_mib": resources.disk_mib,
        "price_per_unit": bundle.price_per_unit,
        "slots": bundle.slots,
    }
    if images is not None:
        terms["images"] = [image.model_dump() for image in images]
        terms["pulls_images"] = pulls
    if gateway is not None:
        terms["gateway_url"] = gateway.url
        if gateway.request_price is not None:
            terms["request_price"] = gateway.request_price
        if gateway.token_prices is not None:
            terms["token_prices"] = list(gateway.token_prices)
    if bundle.gpu_slices:
        tests = slice_tests or {}
        terms["gpu_slices"] = [
            entry.model_copy(update={"selftest": tests.get(slice_key(entry), entry.selftest)})
            .model_dump(mode="json") | {"price_per_unit": price}
            for entry, price in zip(bundle.gpu_slices, bundle.slice_prices, strict=True)
        ]  # fmt: skip
    if bundle.no_slices:
        terms["gpu_slices_note"] = bundle.no_slices[:MAX_FAULT_NOTE]
    if bond.ref is not None:
        terms["bond"] = bond.ref
    if selftest is not None:
        terms["selftest"] = selftest.model_dump(mode="json")
    return terms


SliceKey = tuple[str, int, int]  # a slice's GPU model, memory MiB and SM percent
SliceTests = Mapping[SliceKey, SliceSelfTest]


def slice_key(entry: SliceOffer) -> SliceKey:
    """What names a size of slice: the self-test of one such slice stands for all of them."""
    return entry.gpu_model, entry.memory_mib, entry.sm_percent


def describe_offer(terms: dict[str, Any]) -> str:
    """The offer's terms as an operator reads them in the daemon's log: ADA, MiB, per hour."""
    gpus = (f"{terms['gpu_count']} x {terms['gpu_model']} ({terms['vram_mib']} MiB)"
            if terms["gpu_count"] else "no GPU")  # fmt: skip
    price = terms["price_per_unit"]
    parts = [
        f"{terms['slots']} slot(s) of {gpus}, {terms['cpu_cores']} core(s), "
        f"{terms['memory_mib']} MiB memory, {terms['disk_mib']} MiB disk",
        f"{ada(price * 3600)} per hour ({price} lovelace/s)",
        f"bond {terms['bond']}" if "bond" in terms else "no bond",
        f"payout to {terms['payout_address']}",
    ]
    for entry in terms.get("gpu_slices", ()):
        parts.append(f"{entry['count']} slice(s) of {entry['memory_mib']} MiB / "
                     f"{entry['sm_percent']}% SMs of {entry['gpu_model']} ({entry['isolation']}) "
                     f"at {entry['price_per_unit']} lovelace/s")  # fmt: skip
    if "gpu_slices_note" in terms:
        parts.append(f"GPUs not shared: {terms['gpu_slices_note']}")
    if "gateway_url" in terms:
        parts.append(f"deployments at {terms['gateway_url']}")
    if "selftest" in terms:
        parts.append("self-test " + ("passed" if terms["selftest"]["passed"] else "FAILED"))
    return "; ".join(parts)


@dataclasses.dataclass(frozen=True)
class GatewayTerms:
    """Where the provider's gateway is, its least price per request (None: no per-request
    endpoints) and per input and output token (None: no llm endpoints)."""

    url: str
    request_price: int | None
    token_prices: tuple[int, int] | None = None


class OfferKeeper:
    """Publishes the offer, then heartbeats; publishes again whenever the link was lost."""

    def __init__(
        self, link: MarketLink, bundle: Bundle, payout_address: str, state_dir: Path | None = None,
        images: Callable[[], list[OfferedImage]] = list, pulls: bool = False,
        gateway: GatewayTerms | None = None, slice_tests: Callable[[], SliceTests] = dict,
    ) -> None:  # fmt: skip
        self.link = link
        self.slice_tests = slice_tests  # the slices' latest self-tests (read at each publication)
        self.bundle = bundle
        self.payout_address = payout_address
        self.state_dir = state_dir  # where the self-test summary is saved
        self.images = images  # what is on the machine now (read at each publication)
        self.pulls = pulls
        self.gateway = gateway
        self.published = False

    async def beat(self, bond: BondView, retry_for_s: float) -> None:
        try:
            if self.published:
                try:
                    await self.link.send("POST", "/providers/heartbeat", retry_for_s=retry_for_s)
                    return
                except MarketRefused as exc:
                    if exc.status != NOT_FOUND:
                        raise
            selftest = load_summary(self.state_dir) if self.state_dir else None
            images = await asyncio.to_thread(self.images)
            terms = offer_terms(
                self.bundle,
                self.payout_address,
                bond,
                selftest,
                images,
                self.pulls,
                self.gateway,
                self.slice_tests(),
            )
            await self.link.send("POST", "/offers", Body.of_json(terms), retry_for_s=retry_for_s)
            if not self.published:
                log.info("offer published: %s", describe_offer(terms))
            self.published = True
        except MarketError as exc:
            self.published = False
            log.warning("market unreachable, offer to publish again: %s", exc)
