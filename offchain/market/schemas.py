"""What the API reads (the tables' Create variants). Request bodies refuse unknown fields,
so a typo is a 422 naming it rather than a silently dropped wish. What it answers, the
parties parse too: those models are `offchain.protocol.api.wire`'s."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Any, Literal, TypeVar

from pycardano import Address
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from offchain.chain.utxo import OUT_REF_PATTERN
from offchain.protocol.job.gpu_slices import MAX_FAULT_NOTE, MAX_SLICE_OFFERS, SliceTerms
from offchain.protocol.job.jobspec import MAX_DURATION_S, MAX_SUPPLY_LOVELACE, JobSpec, JobSpecError
from offchain.protocol.job.offer import MAX_IMAGES, OfferedImage, SelfTestSummary
from offchain.protocol.job.outcome import Outcome
from offchain.protocol.job.registry_seal import MAX_SEALED_CHARS

HEX32 = r"^[0-9a-f]{64}$"  # anchored: pydantic finds a pattern anywhere in the text
HEX64 = r"^[0-9a-f]{128}$"
# Bounds on what a request may carry, so every value it stores fits the columns of both
# databases and can be shown: a price per second whose job of the longest run costs no more
# than all ADA there is (so price x units, a lock and their sums over jobs stay far below
# 2**63 per job), a time no later than the last ms of the year 9999 (the calendar's end), an
# exit code a 32-bit column holds, a log position a 64-bit one does.
MAX_PRICE_PER_UNIT = MAX_SUPPLY_LOVELACE // MAX_DURATION_S
MAX_POSIX_MS = 253_402_300_799_999
INT32 = (-(1 << 31), (1 << 31) - 1)
MAX_SEQ = (1 << 63) - 1


def storable_text(text: str) -> str:
    """Text either database stores as sent: UTF-8 cannot encode a lone surrogate, and
    PostgreSQL refuses NUL in text."""
    if "\x00" in text:
        raise ValueError("must not contain NUL (\\u0000)")
    try:
        text.encode()
    except UnicodeEncodeError as exc:
        raise ValueError("must be Unicode text, no lone surrogate (\\ud800-\\udfff)") from exc
    return text


Text = Annotated[str, AfterValidator(storable_text)]


def _texts(value: Any) -> Iterator[str]:
    """Every string in parsed JSON, keys included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from _texts(item)
    elif isinstance(value, list):
        for item in value:
            yield from _texts(item)


S = TypeVar("S", bound=BaseModel)


def requestable(spec: S) -> S:
    """The spec's digest is taken over its canonical JSON: one that has none (a lone
    surrogate in a string) is refused here, naming the spec; so is a NUL, which no command
    line, environment or path can carry (and PostgreSQL cannot read as JSON)."""
    try:
        spec.canonical_json()  # type: ignore[attr-defined]
    except JobSpecError as exc:
        raise ValueError(str(exc)) from exc
    if any("\x00" in text for text in _texts(spec.model_dump(mode="json"))):
        raise ValueError("a string holds NUL (\\u0000), which no process can be given")
    return spec


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


def bech32_address(text: str) -> str:
    try:
        Address.from_primitive(text)
    except Exception as exc:  # pycardano raises several kinds for a bad address
        raise ValueError("not a Cardano address (bech32)") from exc
    return text


class OfferTerms(_Body):
    """A provider's bundle: what one job gets, at what price per second of all of it."""

    payout_address: str = Field(description="Where settlements pay the provider (bech32).")
    gpu_model: Text = Field("", max_length=64, description="Exact model, as NVML names it.")
    gpu_count: int = Field(ge=0, le=64)
    vram_mib: int = Field(0, ge=0, le=1 << 24, description="Per GPU.")
    cpu_cores: int = Field(ge=1, le=1024)
    memory_mib: int = Field(ge=16, le=1 << 24)
    disk_mib: int = Field(ge=1, le=1 << 26)
    price_per_unit: int = Field(
        ge=0, le=MAX_PRICE_PER_UNIT, description="Lovelace per second of the whole bundle."
    )
    slots: int = Field(
        1, ge=1, le=1024, description="Jobs it runs at once, each with this bundle (one per "
        "GPU, or its CPU bundles); no job is matched to it while all are taken.",
    )  # fmt: skip
    bond: str | None = Field(None, pattern=OUT_REF_PATTERN, description="The bond UTxO, TXID#IX.")
    selftest: SelfTestSummary | None = Field(
        None, description="The provider's latest self-test, shown by the explorer."
    )
    images: list[OfferedImage] | None = Field(
        None, max_length=MAX_IMAGES, description="The images on the provider's machine; a job "
        "is matched only to an offer that has its image (or pulls). Absent: none.",
    )  # fmt: skip
    pulls_images: bool = Field(False, description="Whether it pulls an image it does not have.")
    gateway_url: str | None = Field(
        None, pattern=r"^https?://[^/?#\s]+$", max_length=255, description="Where renters "
        "deploy endpoints and pods on it (its gateway), http(s)://HOST:PORT. Absent: none.",
    )  # fmt: skip
    request_price: int | None = Field(
        None, ge=0, le=MAX_SUPPLY_LOVELACE, description="Lovelace per request its endpoints "
        "charge at least. Absent: no per-request endpoints.",
    )  # fmt: skip
    token_prices: list[Annotated[int, Field(ge=0, le=MAX_SUPPLY_LOVELACE)]] | None = Field(
        None, min_length=2, max_length=2, description="Lovelace per input token and per "
        "output token its llm endpoints (`kind: llm`) charge at least. Absent: none.",
    )  # fmt: skip
    gpu_slices: list[SliceTerms] = Field(
        default_factory=list, max_length=MAX_SLICE_OFFERS, description="Fractions of GPUs "
        "rented beside the operator's own work: slices of a model, each a memory size and a "
        "share of the SMs, held by MIG or MPS (fault_note says what that means), at a price "
        "per second of a job's bundle on one. A spec asking gpu_memory_mib + gpu_sm_percent "
        "is matched to one.",
    )  # fmt: skip
    gpu_slices_note: Text | None = Field(
        None, max_length=MAX_FAULT_NOTE, description="Why GPUs the provider would share are "
        "not offered in slices (no MIG, no MPS).",
    )  # fmt: skip

    _address = field_validator("payout_address")(bech32_address)

    @field_validator("selftest")
    @classmethod
    def _selftest_time(cls, selftest: SelfTestSummary | None) -> SelfTestSummary | None:
        if selftest is not None and selftest.at_ms > MAX_POSIX_MS:
            raise ValueError(f"at_ms: {selftest.at_ms} is after the year 9999 ({MAX_POSIX_MS})")
        return selftest

    @model_validator(mode="after")
    def _named_gpus(self) -> OfferTerms:
        if self.gpu_count and not self.gpu_model:
            raise ValueError("gpu_model: name the exact GPU model the offer's GPUs are")
        return self


MIN_START_WITHIN_S = 10  # a Start needs its block: a few of mainnet's 20 s ones
MAX_START_WITHIN_S = 3600
MAX_EXCLUDED = 32


class JobRequest(_Body):
    """A consumer's signed request: the job, where refunds go, and the GPU model if it cares."""

    spec: JobSpec
    consumer_address: str = Field(description="Refunds and change go here (bech32).")
    gpu_model: Text | None = Field(
        None, max_length=64, description="Only this exact model (any case, _ for a space)."
    )
    min_delivered_percent: int | None = Field(
        None, ge=0, le=100, description="Only providers that delivered at least this share "
        "(whole percent) of their jobs that ran or should have, as the chain shows them; "
        "one with no record yet does not qualify.",
    )  # fmt: skip
    exclude_providers: list[Annotated[str, Field(max_length=64)]] = Field(
        default_factory=list, max_length=MAX_EXCLUDED,
        description="Provider ids not to match (a failover: the ones that did not start it).",
    )  # fmt: skip
    start_within_s: int | None = Field(
        None, ge=MIN_START_WITHIN_S, le=MAX_START_WITHIN_S,
        description="A start deadline this many seconds from the quote: a provider that has "
        "not shown the job started by then (its Start on chain) is refunded at once "
        "(failover; PROTOCOL.md).",
    )  # fmt: skip

    _address = field_validator("consumer_address")(bech32_address)

    _canonical = field_validator("spec")(requestable)


class RegistryAccount(_Body):
    sealed: str = Field(
        pattern=r"^[A-Za-z0-9+/]+={0,2}$", max_length=MAX_SEALED_CHARS,
        description="The renter's registry account for its private image, sealed to the "
        "quoted provider's key (base64; only that provider opens it).",
    )  # fmt: skip


class EscrowReport(_Body):
    escrow: str = Field(pattern=OUT_REF_PATTERN, description="The locked escrow, TXID#IX.")


# A browser wallet's part of a request: a transaction is at most 16 KiB (the ledger's
# maxTxSize), a witness set of a few keys far less, a UTxO with its tokens a few KiB; as
# many UTxOs as fit the market's default body limit (1 MiB) at the most.
MAX_TX_HEX = 2 * 16_384
MAX_WITNESS_SET_HEX = 2 * 4096
MAX_UTXO_HEX = 2 * 8192
MAX_WALLET_UTXOS = 50
HEX = r"^[0-9a-fA-F]+$"


class SignedLock(_Body):
    transaction: str = Field(
        pattern=r"^[0-9a-f]+$",
        description="The lock transaction built by the market, signed (hex); unsigned with "
        "`witness_set`.",
    )
    witness_set: str | None = Field(
        None, pattern=HEX, max_length=MAX_WITNESS_SET_HEX,
        description="A CIP-30 signTx(tx, true) answer: its key witnesses are added.",
    )  # fmt: skip


class WalletFunds(_Body):
    """What a browser wallet pays with: its UTxOs as getUtxos() returns them and where
    change goes as getChangeAddress() does."""

    utxos: list[Annotated[str, Field(pattern=HEX, max_length=MAX_UTXO_HEX)]] = Field(
        min_length=1, max_length=MAX_WALLET_UTXOS,
        description="TransactionUnspentOutput CBOR hex each; each is checked on chain.",
    )  # fmt: skip
    change_address: str = Field(
        min_length=1, max_length=256, pattern=r"^[0-9A-Za-z_]+$",
        description="Address bytes hex (CIP-30) or bech32.",
    )  # fmt: skip


class WitnessedTransaction(_Body):
    transaction: str = Field(
        pattern=HEX, max_length=MAX_TX_HEX, description="The transaction as built, CBOR hex."
    )
    witness_set: str = Field(
        pattern=HEX, max_length=MAX_WITNESS_SET_HEX, description="signTx(tx, true)'s answer."
    )


class RefundBuild(WalletFunds):
    slash: bool = Field(False, description="Also slash the provider's bond (it accepted).")


class ChannelOpen(_Body):
    provider_id: str = Field(pattern=r"^[0-9a-f]{56}$")
    deposit: int = Field(ge=1, le=MAX_SUPPLY_LOVELACE, description="Lovelace it may claim.")
    close_period_ms: int = Field(ge=1, le=MAX_POSIX_MS)
    renter_vkey: str | None = Field(
        None, pattern=HEX32, description="The key that signs the IOUs; absent: the signer's."
    )
    funds: WalletFunds


class ChannelTopUp(_Body):
    lovelace: int = Field(ge=1, le=MAX_SUPPLY_LOVELACE)
    funds: WalletFunds


class SpecText(_Body):
    text: Text = Field(max_length=64 * 1024, description="The spec, YAML or JSON.")


class AcceptanceBody(_Body):
    signature: str = Field(pattern=HEX64, description="ed25519 over the Acceptance payload.")
    escrow: str | None = Field(
        None, pattern=OUT_REF_PATTERN,
        description="The escrow the acceptance names, TXID#IX, when its provider Started it "
        "(a new out-ref): the market answers 503 until its chain follower has seen the Start.",
    )  # fmt: skip


class LogLines(_Body):
    lines: list[Text] = Field(min_length=1, max_length=10_000)


class ReceiptBody(_Body):
    units: int = Field(ge=0, le=MAX_DURATION_S, description="Seconds billed.")
    result_hash: str = Field(pattern=HEX32)
    evidence_hash: str = Field(pattern=HEX32)
    signature: str = Field(pattern=HEX64)
    outcome: Outcome | None = Field(
        None, strict=False, description="How the run ended: the provider's word, NOT signed "
        "(the signature covers units and hashes). Absent: not reported.",
    )  # fmt: skip
    exit_code: int | None = Field(
        None, ge=INT32[0], le=INT32[1], description="The program's exit code: the provider's "
        "word, NOT signed.",
    )  # fmt: skip


class FailureBody(_Body):
    exit_code: int | None = Field(None, ge=INT32[0], le=INT32[1])
    reason: Text = Field(min_length=1, max_length=4096)
    receipt: ReceiptBody | None = Field(
        None, description="A zero-unit receipt (units 0, result and evidence hashes the sha256 "
        "of nothing) for a job refused or failed before it ran: the next settle batch returns "
        "the renter's lock less the fee allowance. Absent: the escrow waits for its refund.",
    )  # fmt: skip


class CancelRequest(_Body):
    transaction: str | None = Field(
        None, pattern=r"^[0-9a-f]+$",
        description="The escrow's Cancel, built by the renter (CBOR hex); none for a job "
        "nothing was locked for.",
    )  # fmt: skip


class CancelAnswer(_Body):
    """The provider's answer to a renter's cancel: its witness, the job stopped, or why not."""

    action: Literal["signed", "stopping", "refused"]
    signature: str | None = Field(
        None, pattern=HEX64, description="ed25519 over the transaction's id (signed)."
    )
    reason: Text | None = Field(None, max_length=4096, description="Why it refused (refused).")
