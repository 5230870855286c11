"""The market's public answers as every party reads them: the market's routes answer with
these models and the consumer and the provider parse its JSON into them, so one definition
says what each field is. Not for the commands that must start at once: pydantic is imported
here."""

from __future__ import annotations

from typing import Any, TypeVar

from pycardano import Address
from pydantic import BaseModel, Field, ValidationError

from offchain.protocol.api.market_errors import MarketRefused
from offchain.protocol.job.gpu_slices import SliceTerms
from offchain.protocol.job.job_state import CancelState, JobState
from offchain.protocol.job.outcome import Outcome
from offchain.protocol.ledger.types import EscrowDatum
from offchain.protocol.tx.escrow import new_escrow

Model = TypeVar("Model", bound=BaseModel)


class EscrowParameters(BaseModel):
    """What to lock: the escrow address's script, the datum's fields and the lovelace."""

    escrow_hash: str
    network_id: int
    consumer: str
    provider: str
    provider_vkey: str
    price_per_unit: int
    max_units: int
    deadline: int
    settle_window: int
    job_id: str
    fee_allowance: int
    lovelace: int
    start_deadline: int = 0  # POSIX ms; 0: none

    def to_datum(self) -> EscrowDatum:
        """The escrow datum these parameters ask for, as the validators read it."""
        return new_escrow(
            Address.from_primitive(self.consumer), Address.from_primitive(self.provider),
            bytes.fromhex(self.provider_vkey), self.price_per_unit, self.max_units,
            self.deadline, self.settle_window, bytes.fromhex(self.job_id), self.fee_allowance,
            self.start_deadline,
        )  # fmt: skip


class Assignment(BaseModel):
    """A funded job for the provider: the spec to run and the escrow to check on chain first."""

    job_id: str
    escrow: str
    spec: dict[str, Any]
    price_per_unit: int
    max_units: int
    deadline_ms: int
    cancel_tx: str | None = Field(
        None, description="The renter's Cancel of this escrow (CBOR hex), when it asked to "
        "cancel: sign it if the job has not started (check it first), stop the job if it has.",
    )  # fmt: skip
    registry_account: str | None = Field(
        None, description="The renter's registry account for its private image, sealed to "
        "this provider's key (`registry_seal`): open it to pull the image, for that pull only.",
    )  # fmt: skip


class SignedOffer(BaseModel):
    """An offer exactly as its provider signed it: anyone can verify the signature again."""

    id: int
    provider_id: str
    body: str
    signature: str
    key: str
    terms: dict[str, Any]


class ProviderRecord(BaseModel):
    """A provider's record as the market counts it from the chain (its escrows' and bond's
    endings, its channels' claims and drains), not its word; `delivered_percent` is -1 before
    its first job."""

    delivered: int
    failed: int
    refunded: int
    cancelled: int
    slashed: int
    channels_claimed: int
    channels_drained: int
    delivered_percent: int


class OfferSearch(BaseModel):
    """Offers that meet a search and can take a job now, in its order; when none does, why;
    each offer's provider's record by provider id."""

    offers: list[SignedOffer]
    records: dict[str, ProviderRecord] = Field(default_factory=dict)
    matched: int = Field(description="How many matched (`offers` holds the first `limit`).")
    total: int = Field(description="Active offers searched, online or not.")
    why_none: str | None = Field(description="Why nothing matched, counted per term.")


class Quote(BaseModel):
    """The market's answer to a job request: who runs it, for how much, until when."""

    job_id: str
    state: JobState
    offer: SignedOffer
    gpu_model: str
    price_per_unit: int
    max_units: int
    max_cost: int
    deadline_ms: int
    settle_window_ms: int
    fee_allowance: int = Field(
        description="Lovelace of the lock that is not refunded: it pays the settle fee "
        "(settle_fee_share; see fee_allowance_note)."
    )
    refund_deposit: int = Field(
        description="Lovelace of the lock that always comes back to the renter: at least the "
        "ledger's minimum for its refund output (more when a cheap job's lock is raised to the "
        "escrow output's own minimum), so no settlement ever needs a top-up (lock_lovelace = "
        "max_cost + fee_allowance + refund_deposit)."
    )
    lock_lovelace: int
    quote_expires_ms: int
    settle_fee_share: int = Field(
        description="The part of the allowance that pays this job's share of a settle fee (the "
        "cost of a settle alone, measured, with a margin)."
    )
    fee_allowance_note: str = Field(description="What the allowance covers, in words.")
    image: str | None = Field(
        None, description="The image the job runs: the spec's, or its registry tag pinned to "
        "the digest the registry named at quote time (what the job id digests and the renter "
        "checks); None from a market that pins none.",
    )  # fmt: skip
    gpu_slice: SliceTerms | None = Field(
        None, description="A job asking a fraction of a GPU: the slice of the offer it gets "
        "(the cheapest that holds it; its price is price_per_unit), with its isolation (mig or "
        "mps) and fault note. None: whole GPUs or none.",
    )  # fmt: skip


class LockTransaction(BaseModel):
    """The escrow's lock, unsigned: the consumer signs it with its own wallet and submits it,
    or posts it back for the market to submit (only this body is accepted)."""

    transaction: str = Field(description="Unsigned transaction, CBOR hex (CIP-30 signTx).")
    tx_id: str
    escrow: str = Field(description="The escrow it creates, TXID#IX.")
    lovelace: int = Field(description="Locked in the escrow.")


class Submitted(BaseModel):
    tx_id: str
    escrow: str


class WalletTransaction(BaseModel):
    """A transaction the market built unsigned from a browser wallet's UTxOs: the page shows
    what it pays from the transaction itself, the wallet signs it (CIP-30 `signTx(tx, true)`)
    and the page posts the witness set to the step's submit route."""

    transaction: str = Field(description="Unsigned transaction, CBOR hex.")
    tx_id: str
    fee: int = Field(description="Its fee, lovelace (paid by the wallet).")
    escrow: str | None = Field(None, description="The job's escrow it spends, TXID#IX.")
    channel_id: str | None = Field(None, description="The channel it moves.")
    step: str | None = Field(None, description="A channel close's step: start_close or drain.")


class WalletLock(LockTransaction):
    """The lock from the wallet's UTxOs, and what the quote says it pays: exactly one output
    to `escrow_address` (script `escrow_hash`) of `lovelace`, the rest change to the wallet."""

    fee: int
    escrow_address: str = Field(description="bech32, staked like the renter's address.")
    escrow_hash: str
    quoted_lovelace: int = Field(description="The quote's lock_lovelace.")


class WalletChannel(WalletTransaction):
    """A channel's open: its id, terms and output (CHANNEL_OUTPUT)."""

    channel_id: str
    terms_cbor: str
    channel_address: str
    lovelace: int = Field(description="In the channel: the deposit and its return deposit.")


class AppConfig(BaseModel):
    """What the browser pages need before anything is signed."""

    market: str = Field(description="The identity every signed request names.")
    network_id: int = Field(description="As CIP-30 getNetworkId() answers (1 mainnet).")
    network: str
    escrow_hash: str
    escrow_address: str = Field(description="The escrow script's address, unstaked (bech32).")
    channel_hash: str
    channel_address: str
    bond_hash: str
    settle_hash: str = Field(description="Signed into every receipt (protocol/receipt.py).")
    refund_window_ms: int
    max_utxos: int = Field(description="The most wallet UTxOs a build takes.")


class SpecCheck(BaseModel):
    """A spec checked as the CLI reads one: its messages, or the parsed spec."""

    ok: bool
    messages: list[str] = Field(description="The CLI's lines, one per problem.")
    kind: str | None = None
    spec: dict[str, Any] | None = Field(None, description="Canonical: post it as the spec.")
    spec_digest: str | None = Field(None, description="sha256 of its canonical JSON (job id).")


class JobPublic(BaseModel):
    id: str
    state: JobState
    provider_id: str | None
    gpu_model: str | None
    price_per_unit: int | None
    deadline_ms: int | None
    escrow: str | None
    receipt_units: int | None
    result_sha256: str | None
    result_size: int | None
    exit_code: int | None
    outcome: Outcome | None = Field(
        description="How the run ended (succeeded, failed, timeout, oom, cancelled, stopped), "
        "beside its state: the provider's word with its receipt, not signed."
    )
    failure_reason: str | None
    settle_tx: str | None
    created_at_ms: int
    updated_at_ms: int


class EventPublic(BaseModel):
    id: int
    at_ms: int
    from_state: JobState | None
    to_state: JobState
    cause: str
    detail: str
    slot: int | None
    block_height: int | None
    tx_id: str | None


class LogPublic(BaseModel):
    seq: int
    at_ms: int
    text: str


class CancelView(BaseModel):
    """A renter's cancel as it stands: once `signed`, `transaction` carries the provider's
    witness and the renter adds its own and submits it."""

    job_state: JobState
    state: CancelState | None
    transaction: str | None
    refusal: str | None


class SignedEvidence(BaseModel):
    """The provider's signatures of a job exactly as stored: the acceptance slashes its bond
    with a refund when the job is never delivered; the receipt proves which result archive
    it was paid for. The consumer checks both against the escrow's provider key itself."""

    escrow: str | None
    acceptance_signature: str | None = Field(description="ed25519 over the Acceptance payload.")
    receipt_units: int | None
    receipt_result_hash: str | None
    receipt_evidence_hash: str | None
    receipt_signature: str | None = Field(description="ed25519 over the Receipt payload.")


def parse(model: type[Model], answer: Any, what: str) -> Model:
    """The market's JSON `answer` to `what` as `model`; MarketRefused when it is not one
    (an older or broken market), never a traceback."""
    try:
        return model.model_validate(answer)
    except ValidationError as exc:
        raise MarketRefused(
            f"the market's answer to {what} is not a {model.__name__}: {exc}",
            answer=str(answer)[:500],
        ) from exc


def parse_list(model: type[Model], answer: Any, what: str) -> list[Model]:
    """The market's JSON list `answer` to `what`, each item as `model` (`parse`)."""
    if not isinstance(answer, list):
        raise MarketRefused(
            f"the market's answer to {what} is not a list of {model.__name__}",
            answer=str(answer)[:500],
        )
    return [parse(model, item, what) for item in answer]
