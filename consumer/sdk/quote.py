"""Check a quote before locking anything: the offer inside it must be signed by the provider
it names (a CIP-8 signature over the offer's exact body, to this market), its bundle must
cover the spec, and the escrow the market asks for must be exactly that offer's price for this
spec, paying this consumer and that provider, within the consumer's limits. The market is a
matchmaker: nothing it says is taken on trust."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

from pycardano import Address

from consumer.sdk.errors import QuoteRejected
from offchain.protocol.api.signed_request import RequestFields, SignedRequestError, open_signed
from offchain.protocol.api.wire import EscrowParameters, Quote, SignedOffer
from offchain.protocol.job.gpu_slices import cheapest_fit
from offchain.protocol.job.jobspec import JobSpec
from offchain.protocol.job.registry import RegistryError, default_host, names_registry, resolve
from offchain.protocol.ledger.amounts import ADA
from offchain.protocol.ledger.split import lock_amount
from offchain.protocol.ledger.types import EscrowDatum
from offchain.protocol.tx.deployment import Deployment

MAX_START_MS = 60 * 60_000  # the longest a quote may leave between now and the job's start
MAX_SETTLE_WINDOW_MS = 24 * 60 * 60_000  # funds wait at most this past the deadline
MAX_FEE_ALLOWANCE = 10 * ADA
OFFER_PATH = "/offers"


@dataclasses.dataclass(frozen=True)
class CheckedQuote:
    """A quote whose offer and escrow terms were checked; `datum` is what gets locked."""

    job_id: str
    provider_id: str
    gpu_model: str
    terms: dict[str, Any]  # the offer's body as the provider signed it
    datum: EscrowDatum
    lovelace: int
    quote_expires_ms: int
    refund_deposit: int  # of `lovelace`, always refunded: at least the refund's minimum UTxO
    bond_lovelace: int = 0  # the bond the offer names, checked on chain (0: none named)
    allowance_note: str = ""  # the market's words for what the fee allowance covers
    image: str = ""  # the image locked: the spec's, or its registry tag pinned to a digest

    @property
    def max_cost(self) -> int:
        return self.datum.price_per_unit * self.datum.max_units

    @property
    def worst_case(self) -> int:
        """The most the consumer can lose to the escrow: the full job and the fee allowance."""
        return self.max_cost + self.datum.fee_allowance


def same_model(asked: str, offered: str) -> bool:
    """GPU models as the market compares them: any case, `_` for a space."""
    return asked.replace("_", " ").casefold() == offered.replace("_", " ").casefold()


def offer_signer(offer: SignedOffer, market: str) -> bytes:
    """The 32-byte key that signed the offer's body for `market`, or QuoteRejected."""
    try:
        vkey, _address, payload = open_signed(offer.signature, offer.key)
        fields = RequestFields.parse(payload)
    except SignedRequestError as exc:
        raise QuoteRejected(f"the offer's signature is not valid: {exc.message}") from exc
    body_sha256 = hashlib.sha256(offer.body.encode()).hexdigest()
    signed = {"method": "POST", "path": OFFER_PATH, "market": market, "body_sha256": body_sha256}
    for name, value in signed.items():
        if getattr(fields, name) != value:
            raise QuoteRejected(
                f"the offer's signature is not over this offer (signed {name} "
                f"{getattr(fields, name)!r}, expected {value!r}): refusing the quote"
            )
    if vkey.hash().payload.hex() != offer.provider_id:
        raise QuoteRejected("the offer was signed by another key than its provider's")
    return vkey.payload


def bundle_problems(terms: dict[str, Any], spec: JobSpec, gpu_model: str | None) -> list[str]:
    """What the offered bundle lacks for the spec (empty when it covers it)."""
    wanted = spec.resources
    have = {
        "gpus": (terms["gpu_count"], wanted.gpus),
        "vram_mib": (terms["vram_mib"] if wanted.gpus else 0, wanted.min_vram_mib),
        "cpu_cores": (terms["cpu_cores"], wanted.cpu_cores),
        "memory_mib": (terms["memory_mib"], wanted.memory_mib),
        "disk_mib": (terms["disk_mib"], wanted.disk_mib),
    }
    problems = [f"offer has {name} {got} < {need}" for name, (got, need) in have.items()
                if got < need]  # fmt: skip
    if gpu_model and not same_model(gpu_model, terms["gpu_model"]):
        problems.append(f"offer's GPU is {terms['gpu_model']!r}, not {gpu_model!r}")
    return problems


def check_quote(
    quote: Quote,
    params: EscrowParameters,
    spec: JobSpec,
    consumer: Address,
    deployment: Deployment,
    market: str,
    now_ms: int,
    lock: int,
    gpu_model: str | None = None,
    start_within_s: int | None = None,
) -> CheckedQuote:
    """`quote` (POST /jobs) and `params` (GET /jobs/{id}/escrow) checked against the spec and
    the provider's signed offer; `now_ms` is chain time, `lock` what a lock of the params'
    datum holds (`escrow.lock_lovelace`: the job, its allowance and the return deposit).
    QuoteRejected lists every problem."""
    offer = quote.offer
    provider_vkey = offer_signer(offer, market)
    terms = json.loads(offer.body)
    price = terms["price_per_unit"]
    problems = bundle_problems(terms, spec, gpu_model)
    if spec.resources.fraction is not None:  # a GPU slice: the cheapest that holds it
        piece = cheapest_fit(terms.get("gpu_slices", []), spec.resources.fraction)
        if piece is None:
            problems.append("the offer has no GPU slice that holds the fraction asked")
        price = terms["price_per_unit"] if piece is None else piece.price_per_unit
    fee_allowance, deadline = params.fee_allowance, params.deadline
    expected = {
        "the provider's key": (params.provider_vkey, provider_vkey.hex()),
        "the provider's address": (params.provider, terms["payout_address"]),
        "the consumer's address": (params.consumer, str(consumer)),
        "the price per unit": (params.price_per_unit, price),
        "the quoted price": (quote.price_per_unit, price),
        "the quoted GPU": (quote.gpu_model, terms["gpu_model"]),
        "max units": (params.max_units, spec.max_duration_s),
        "the job id (spec digest)": (params.job_id, spec.job_id().hex()),
        "the escrow script": (params.escrow_hash, deployment.escrow_hash.payload.hex()),
        "the network": (params.network_id, deployment.network_id),
    }
    problems += [f"{what} is {got!r}, expected {want!r}"
                 for what, (got, want) in expected.items() if got != want]  # fmt: skip
    if price * spec.max_duration_s > spec.max_price_lovelace:
        problems.append(
            f"{price} lovelace/s x {spec.max_duration_s} s exceeds max_price_lovelace "
            f"{spec.max_price_lovelace}"
        )
    deposit = lock - lock_amount(price, spec.max_duration_s, fee_allowance, 0)
    if params.lovelace != lock or quote.refund_deposit != deposit:
        problems.append(
            f"the lock of {params.lovelace} lovelace (a return deposit of "
            f"{quote.refund_deposit}) is not price x units + fee allowance + the return "
            f"deposit of {deposit}, {lock}"
        )
    if fee_allowance > MAX_FEE_ALLOWANCE:
        problems.append(f"the fee allowance {fee_allowance} exceeds {MAX_FEE_ALLOWANCE}")
    if not 0 < params.settle_window <= MAX_SETTLE_WINDOW_MS:
        problems.append(f"the settle window {params.settle_window} ms is outside "
                        f"1..{MAX_SETTLE_WINDOW_MS} ms")  # fmt: skip
    run_ms = spec.max_duration_s * 1000
    if not now_ms + run_ms <= deadline <= now_ms + run_ms + MAX_START_MS:
        problems.append(
            f"the deadline leaves {deadline - now_ms} ms from now (chain time) for a "
            f"{run_ms} ms job; expected {run_ms} to {run_ms + MAX_START_MS} ms"
        )
    problems += start_deadline_problems(params.start_deadline, now_ms, start_within_s)
    if problems:
        raise QuoteRejected("refusing the quote, nothing locked: " + "; ".join(problems),
                            problems=problems)  # fmt: skip
    return CheckedQuote(
        job_id=quote.job_id, provider_id=offer.provider_id, gpu_model=terms["gpu_model"],
        terms=terms, datum=params.to_datum(), lovelace=params.lovelace,
        quote_expires_ms=quote.quote_expires_ms, refund_deposit=deposit,
        allowance_note=quote.fee_allowance_note, image=spec.image,
    )  # fmt: skip


def start_deadline_problems(start_deadline: int, now_ms: int, asked_s: int | None) -> list[str]:
    """The quoted start deadline against the one asked: none when none was asked (a start
    deadline only adds the renter's early refund, but the renter did not choose it), else
    still ahead and no later than asked (chain time)."""
    if asked_s is None:
        return [] if start_deadline == 0 else [f"a start deadline {start_deadline} not asked for"]
    if not now_ms < start_deadline <= now_ms + asked_s * 1000:
        return [
            f"the start deadline leaves {start_deadline - now_ms} ms from now (chain time); "
            f"asked: at most {asked_s * 1000} ms"
        ]
    return []


def locked_spec(
    spec: JobSpec, quoted_image: str | None, default_registry: str | None = None
) -> JobSpec:
    """The spec the quote's escrow digests: `spec`, or with its registry tag (a bare name: in
    the renter's `default_registry`) pinned to the digest the market quoted, once the registry
    (asked from here: the market's word is not taken) names that same digest. QuoteRejected
    otherwise: nothing is locked."""
    if quoted_image is None or quoted_image == spec.image:
        return spec
    asked = spec.image
    bare = not names_registry(asked) and default_host(default_registry) is None
    if bare or "@" in asked:
        raise QuoteRejected(f"the market quoted image {quoted_image}, not the {asked} asked: "
                            "refusing the quote, nothing locked")  # fmt: skip
    try:
        digest = resolve(asked, default_registry=default_registry)
    except RegistryError as exc:
        raise QuoteRejected(f"cannot check the market's pin of {asked} to {quoted_image}: "
                            f"{exc}; refusing the quote, nothing locked") from exc  # fmt: skip
    if digest != quoted_image:
        raise QuoteRejected(
            f"the market pinned {asked} to {quoted_image} but the registry names {digest}: "
            "refusing the quote, nothing locked"
        )
    return spec.model_copy(update={"image": digest})
