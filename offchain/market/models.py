"""The market's tables, each entity once (SQLModel): what the API, the chain follower, the
scheduler and the explorer read and write.

Lovelace and POSIX ms are BIGINT everywhere (PostgreSQL's INTEGER stops at 2**31); keys and
hashes are lower-case hex; out-refs are `TXID#IX`. Bodies that were signed are kept exactly
as received, so anyone can check the signature again.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pycardano import TransactionInput
from sqlalchemy import BigInteger, Column, Index, LargeBinary, String, Text, UniqueConstraint
from sqlmodel import Field, SQLModel

from offchain.chain.utxo import parse_out_ref

# re-exported: the tables' columns hold them, and the services import them with the tables
from offchain.protocol.job.job_state import CancelState as CancelState
from offchain.protocol.job.job_state import JobState as JobState
from offchain.protocol.job.outcome import Outcome
from offchain.protocol.job.receipt import BODY_FIELDS, Receipt


def _big(*, index: bool = False, nullable: bool = False) -> Any:
    return Field(default=None if nullable else ..., sa_type=BigInteger, index=index,
                 nullable=nullable)  # fmt: skip


def _name(default: Any = ..., *, nullable: bool = False, index: bool = False) -> Any:
    """An enum stored as its string (no database enum type to migrate when a state is added)."""
    return Field(default=default, sa_type=String(16), nullable=nullable, index=index)


class Cause(StrEnum):
    """Who moved a job: a request to the API, the chain (a block/tx) or scheduled work."""

    API = "api"
    CHAIN = "chain"
    SCHEDULER = "scheduler"


class Provider(SQLModel, table=True):
    id: str = Field(primary_key=True, max_length=56, description="blake2b-224 of the vkey")
    vkey: str = Field(max_length=64)
    payout_address: str
    last_heartbeat_ms: int = _big(index=True)
    bond_ref: str | None = None
    bond_lovelace: int | None = _big(nullable=True)
    bond_state: str | None = Field(default=None, max_length=16)
    offline_since_ms: int | None = _big(nullable=True)
    selftest: str | None = Field(
        default=None, sa_column=Column(Text, nullable=True),
        description="the self-test summary of its latest offer, as signed (JSON)",
    )  # fmt: skip


class OnlineSpan(SQLModel, table=True):
    """A stretch of time a provider kept heartbeating (no gap longer than the online window):
    its first and latest heartbeat. One row per stretch keeps a week of history small and
    uptime one grouped sum."""

    __table_args__ = (Index("ix_onlinespan_provider_end", "provider_id", "end_ms"),)

    id: int | None = Field(default=None, primary_key=True)
    provider_id: str = Field(foreign_key="provider.id", max_length=56)
    start_ms: int = _big()
    end_ms: int = _big()


class Offer(SQLModel, table=True):
    __table_args__ = (
        Index("ix_offer_match", "active", "gpu_model", "gpu_count", "vram_mib"),
        Index("ix_offer_price", "active", "price_per_unit"),
    )

    id: int | None = Field(default=None, primary_key=True)
    provider_id: str = Field(foreign_key="provider.id", index=True, max_length=56)
    body: str = Field(sa_column=Column(Text, nullable=False), description="canonical JSON")
    signature: str = Field(sa_column=Column(Text, nullable=False), description="COSE_Sign1 hex")
    key: str = Field(sa_column=Column(Text, nullable=False), description="COSE_Key hex")
    gpu_model: str = Field(max_length=64)
    gpu_count: int
    vram_mib: int
    cpu_cores: int
    memory_mib: int
    disk_mib: int
    price_per_unit: int = _big()
    slots: int = Field(
        default=1, description="Jobs it runs at once, each with this bundle (one per GPU, or "
        "its CPU bundles): it matches no job while every slot is accepted or running.",
    )  # fmt: skip
    created_at_ms: int = _big()
    active: bool = True


RECEIPT = "receipt_"  # the prefix of the columns that hold a job's receipt


class Job(SQLModel, table=True):
    __table_args__ = (Index("ix_job_state_updated", "state", "updated_at_ms"),)

    id: str = Field(primary_key=True, max_length=32)
    consumer_vkey: str = Field(max_length=64)
    consumer_id: str = Field(index=True, max_length=56)
    consumer_address: str
    spec: str = Field(sa_column=Column(Text, nullable=False), description="canonical JSON")
    spec_digest: str = Field(max_length=64, description="the escrow's job_id")
    max_price: int = _big()
    provider_id: str | None = Field(default=None, foreign_key="provider.id", index=True)
    offer_id: int | None = Field(default=None, foreign_key="offer.id")
    provider_vkey: str | None = Field(default=None, max_length=64)
    provider_address: str | None = None
    gpu_model: str | None = Field(default=None, max_length=64, description="as quoted")
    price_per_unit: int | None = _big(nullable=True)
    max_units: int | None = _big(nullable=True)
    deadline_ms: int | None = _big(nullable=True)
    start_deadline_ms: int | None = _big(nullable=True)  # the escrow's; None: none
    settle_window_ms: int | None = _big(nullable=True)
    fee_allowance: int | None = _big(nullable=True)
    lock_lovelace: int | None = _big(nullable=True)
    quote_expires_ms: int | None = _big(nullable=True)
    lock_tx_id: str | None = Field(
        default=None, max_length=64, description="the unsigned lock built for the consumer"
    )
    escrow_ref: str | None = Field(default=None, unique=True, max_length=80)
    acceptance_signature: str | None = Field(default=None, max_length=128)
    receipt_units: int | None = _big(nullable=True)
    receipt_result_hash: str | None = Field(default=None, max_length=64)
    receipt_evidence_hash: str | None = Field(default=None, max_length=64)
    receipt_signature: str | None = Field(default=None, max_length=128)
    result_sha256: str | None = Field(default=None, foreign_key="blob.sha256")
    exit_code: int | None = Field(default=None, description="the provider's word, not signed")
    outcome: Outcome | None = _name(None, nullable=True)  # the provider's word, not signed
    failure_reason: str | None = None
    settle_tx: str | None = Field(default=None, max_length=64)
    escrow_height: int | None = _big(nullable=True, index=True)
    refundable_since_ms: int | None = _big(nullable=True)
    unsettleable: str | None = Field(
        default=None, description="why the market's batcher leaves this receipt alone (the "
        "escrow is spent, its window closes, it would cost more than its fee allowance)",
    )  # fmt: skip
    escrow_terms: str | None = Field(
        default=None, unique=True, max_length=64,
        description="sha256 of the quoted escrow datum: no two quotes share one lock",
    )  # fmt: skip
    cancel_tx: str | None = Field(
        default=None, sa_column=Column(Text, nullable=True),
        description="the Cancel the renter posted (CBOR hex), with the provider's witness "
        "once it signed: the renter adds its own and submits it",
    )  # fmt: skip
    cancel_state: CancelState | None = _name(None, nullable=True)
    cancel_refusal: str | None = Field(default=None, description="why the provider refused it")
    state: JobState = _name(JobState.REQUESTED)
    created_at_ms: int = _big()
    updated_at_ms: int = _big()
    results_forgotten: bool = False  # its files and logs deleted after the retention
    registry_account: str | None = Field(
        default=None, sa_column=Column(Text, nullable=True),
        description="the renter's registry account for a private image, sealed to the "
        "provider's key (`registry_seal`): ciphertext the market only carries",
    )  # fmt: skip

    # Columns a job has from its quote or its lock on, typed for code that runs past that
    # point (the API's `jobs.expect` checked the state): reading one sooner is a bug.

    @property
    def escrow(self) -> TransactionInput:
        """Its escrow's out-ref (a locked job's)."""
        assert self.escrow_ref is not None, f"job {self.id} has no escrow"
        return parse_out_ref(self.escrow_ref)

    @property
    def provider_key(self) -> bytes:
        """Its provider's verification key (a quoted job's)."""
        assert self.provider_vkey is not None, f"job {self.id} is not quoted"
        return bytes.fromhex(self.provider_vkey)

    @property
    def close_ms(self) -> int:
        """When its escrow's settle window closes (a quoted job's)."""
        deadline, window = self.deadline_ms, self.settle_window_ms
        assert deadline is not None and window is not None, f"job {self.id} is not quoted"
        return deadline + window

    @property
    def receipt(self) -> Receipt | None:
        """The provider's signed receipt, its body kept in the receipt_* columns; None before
        there is one."""
        if self.receipt_signature is None or self.escrow_ref is None:
            return None
        columns = {RECEIPT + name: getattr(self, RECEIPT + name) for name in BODY_FIELDS}
        return Receipt.from_body(parse_out_ref(self.escrow_ref), columns, RECEIPT)

    def keep_receipt(self, receipt: Receipt) -> None:
        """Put `receipt` in the receipt_* columns, as `receipt` reads it back."""
        for name, value in receipt.body().items():
            setattr(self, RECEIPT + name, value)


class JobEvent(SQLModel, table=True):
    id: int | None = Field(default=None, primary_key=True)
    job_id: str = Field(foreign_key="job.id", index=True)
    at_ms: int = _big()
    from_state: JobState | None = _name(None, nullable=True)
    to_state: JobState = _name()
    cause: Cause = _name()
    detail: str = ""
    slot: int | None = _big(nullable=True)
    block_height: int | None = _big(nullable=True)
    tx_id: str | None = Field(default=None, max_length=64)


class Nonce(SQLModel, table=True):
    """A signed request's nonce, once per signer: a second use is a replay."""

    __table_args__ = (UniqueConstraint("signer", "nonce"),)

    id: int | None = Field(default=None, primary_key=True)
    signer: str = Field(max_length=56)
    nonce: str = Field(max_length=128)
    seen_at_ms: int = _big(index=True)
    keep_until_ms: int = _big(index=True)  # its request is stale after: the row may go


class LogLine(SQLModel, table=True):
    __table_args__ = (UniqueConstraint("job_id", "seq"),)

    id: int | None = Field(default=None, primary_key=True)
    job_id: str = Field(foreign_key="job.id")
    seq: int
    at_ms: int = _big()
    text: str = Field(sa_column=Column(Text, nullable=False))


class Blob(SQLModel, table=True):
    """A stored file, content-addressed: its bytes are its `BlobChunk` rows, in the database,
    so whichever host of the market a request reaches serves it."""

    sha256: str = Field(primary_key=True, max_length=64)
    size: int = _big()


class BlobChunk(SQLModel, table=True):
    """One piece of a stored file (`storage.CHUNK_BYTES`, the last one shorter), in order."""

    __tablename__ = "blob_chunk"

    sha256: str = Field(foreign_key="blob.sha256", primary_key=True, max_length=64)
    seq: int = Field(primary_key=True)
    data: bytes = Field(sa_type=LargeBinary)


class ChainPoint(SQLModel, table=True):
    """A block the chain follower applied and may still see rolled back: the newest are where
    it resumes after a restart, older ones let findIntersection succeed after a rollback."""

    slot: int = Field(
        sa_type=BigInteger, primary_key=True, sa_column_kwargs={"autoincrement": False}
    )
    block_id: str = Field(max_length=64)
    height: int = _big(index=True)


class ChainUndo(SQLModel, table=True):
    """What one change the follower made looked like before it (per block): a rollback past
    `slot` restores these, newest first. `before` is the row's changed columns as JSON, or
    null when the block created the row."""

    id: int | None = Field(default=None, primary_key=True)
    slot: int = _big(index=True)
    height: int = _big()
    table_name: str = Field(max_length=16)
    key: str = Field(max_length=80)
    before: str | None = Field(default=None, sa_column=Column(Text, nullable=True))


class Bond(SQLModel, table=True):
    """A bond UTxO seen on chain, by out-ref: created, unbonding, spent (topped up, slashed,
    withdrawn). A provider's current bond is its newest unspent one."""

    ref: str = Field(primary_key=True, max_length=80)
    provider_id: str = Field(index=True, max_length=56, description="blake2b-224 of the vkey")
    lovelace: int = _big()
    unbonding_since_ms: int | None = _big(nullable=True)
    created_slot: int = _big()
    spent_tx: str | None = Field(default=None, max_length=64)
    spent_as: str | None = Field(default=None, max_length=16, description="the bond redeemer")


class ChannelState(StrEnum):
    """Where a payment channel stands: open, closing (the renter started its close period),
    or gone: drained by its renter after the close period, ended by its provider, or closed by
    both."""

    OPEN = "open"
    CLOSING = "closing"
    DRAINED = "drained"
    ENDED = "ended"
    CLOSED = "closed"


class ChannelMove(StrEnum):
    """What one transaction did to a channel, by its redeemer (a claim: the claim script's)."""

    OPEN = "open"
    CLAIM = "claim"
    TOP_UP = "top-up"
    START_CLOSE = "start-close"
    DRAIN = "drain"
    END = "end"
    MUTUAL_CLOSE = "mutual-close"


class ChannelNow(SQLModel):
    """A channel's state after a move: its UTxO (none once it is gone), all the lovelace put
    in (`funded`: the open's lock and every top-up), what its provider claimed so far, what
    the UTxO still holds, and from when its renter may drain it (None while open)."""

    ref: str | None = Field(default=None, max_length=80, description="TXID#IX")
    state: ChannelState = _name()
    funded: int = _big()
    claimed: int = _big()
    lovelace: int = _big()
    closing_at_ms: int | None = _big(nullable=True)


class Channel(ChannelNow, table=True):
    """A payment channel of the deployment's channel script, by its id (blake2b-224 of its
    terms), with its terms as its open transaction's metadata carries them and its state as of
    its newest ChannelEvent: the chain follower writes both in one database transaction, and
    a rollback restores the row from the events it leaves (`channel_index`)."""

    __table_args__ = (
        Index("ix_channel_ref", "ref"),
        Index("ix_channel_opened", "opened_slot", "id"),
        Index("ix_channel_state", "state", "opened_slot", "id"),
        Index("ix_channel_provider", "provider_id", "opened_slot", "id"),
        Index("ix_channel_renter", "renter", "opened_slot", "id"),
        Index("ix_channel_payee", "provider", "opened_slot", "id"),
    )

    id: str = Field(primary_key=True, max_length=56)
    renter: str = Field(max_length=128, description="bech32, as the terms name it")
    renter_vkey: str = Field(max_length=64, description="signs the IOUs")
    provider: str = Field(max_length=128, description="bech32: where claims pay")
    provider_vkey: str = Field(max_length=64)
    provider_id: str = Field(max_length=56, description="blake2b-224 of provider_vkey")
    close_period_ms: int = _big()
    nonce: str = Field(max_length=80, description="the input its open spent: TXID#IX")
    open_tx: str = Field(max_length=64)
    opened_slot: int = _big()


class ChannelEvent(ChannelNow, table=True):
    """One transaction's move of one channel, in the block that holds it, with the channel as
    it left it. `amount` is the lovelace the move put in (open, top-up), paid the provider
    (claim) or gave back to the renter (drain, end); 0 for a start of close or a mutual
    close, whose outputs the transaction page shows."""

    __table_args__ = (Index("ix_channelevent_channel_slot", "channel_id", "slot", "id"),)

    id: int | None = Field(default=None, primary_key=True)
    channel_id: str = Field(foreign_key="channel.id", max_length=56)
    move: ChannelMove = _name()
    amount: int = _big()
    tx_id: str = Field(max_length=64, index=True)
    slot: int = _big(index=True)
    height: int = _big()


class SettlementState(StrEnum):
    BUILT = "built"  # recorded before its first submission: it may or may not be in a mempool
    SUBMITTED = "submitted"
    CONFIRMED = "confirmed"  # the follower saw it in a block
    CONFLICTED = "conflicted"  # the follower saw one of its escrows spent by another transaction
    EXPIRED = "expired"  # its ttl passed without it landing: its jobs were released
    REFUSED = "refused"  # the ledger refused its first submission: its jobs were released


class Settlement(SQLModel, table=True):
    """One settle transaction the batcher built, and the escrows it spends: recorded, signed
    bytes included, before it is first submitted, so a restart resubmits the same transaction
    and never builds a second one for its escrows until this one can no longer land."""

    tx_id: str = Field(primary_key=True, max_length=64)
    state: SettlementState = _name(index=True)
    escrows: str = Field(sa_column=Column(Text, nullable=False), description="JSON list")
    tx_cbor: str = Field(sa_column=Column(Text, nullable=False), description="signed, hex")
    ttl_slot: int = _big()
    submitted_at_ms: int | None = _big(nullable=True)
    created_at_ms: int = _big()
    updated_at_ms: int = _big()


class Rental(SQLModel, table=True):
    """An endpoint or pod a provider runs for a renter, paid on one of the renter's channels,
    as the provider last reported it (`offchain.protocol.api.rental_report`: its word, signed;
    only its channel's provider is checked, against the channel index). Rows only move
    forward; a name reused later is another row (another `created_ms`)."""

    __tablename__ = "deployment"
    __table_args__ = (
        UniqueConstraint("provider_id", "name", "created_ms"),
        Index("ix_deployment_created", "created_ms", "id"),
        Index("ix_deployment_state", "state", "created_ms", "id"),
        Index("ix_deployment_kind", "kind", "created_ms", "id"),
        Index("ix_deployment_provider", "provider_id", "created_ms", "id"),
        Index("ix_deployment_channel", "channel", "created_ms", "id"),
    )

    id: int | None = Field(default=None, primary_key=True)
    provider_id: str = Field(foreign_key="provider.id", max_length=56)
    name: str = Field(max_length=64)
    kind: str = Field(max_length=16, description="endpoint | pod | job")
    channel: str = Field(max_length=56, description="the channel id that pays for it, hex")
    image_digest: str = Field(max_length=255)
    state: str = Field(max_length=16, description="pending -> running -> stopped | failed")
    reason: str = Field(sa_column=Column(Text, nullable=False))
    price_per_request: int = _big()
    price_per_second: int = _big()
    created_ms: int = _big()
    started_ms: int = _big()
    stopped_ms: int = _big()
    requests: int = _big()
    served: int = _big()
    seconds_run: int = _big()
    first_reported_ms: int = _big()
    reported_ms: int = _big()


# --- the chain index the explorer reads (offchain.market.services.chain_index writes it) ---


class ChainBlock(SQLModel, table=True):
    """A block the follower applied: what the home and block pages list."""

    slot: int = Field(
        sa_type=BigInteger, primary_key=True, sa_column_kwargs={"autoincrement": False}
    )
    height: int = Field(sa_type=BigInteger, unique=True, index=True)
    block_id: str = Field(max_length=64, index=True)
    tx_count: int
    indexed_txs: int = Field(description="transactions of this block that touch our scripts")


class ChainTx(SQLModel, table=True):
    """A transaction touching our scripts, decoded (`tx_view`) as JSON."""

    __table_args__ = (Index("ix_chaintx_slot_tx", "slot", "tx_id"),)

    tx_id: str = Field(primary_key=True, max_length=64)
    slot: int = Field(sa_type=BigInteger)
    height: int = Field(sa_type=BigInteger)
    view: str = Field(sa_column=Column(Text, nullable=False))


class ChainTxOut(SQLModel, table=True):
    """An output of an indexed transaction: what an input that spends it showed, and what the
    address page lists (newest first, by the address index)."""

    __table_args__ = (Index("ix_chaintxout_address_slot", "address", "slot", "ref"),)

    ref: str = Field(primary_key=True, max_length=80, description="TXID#IX")
    slot: int = Field(sa_type=BigInteger)
    address: str = Field(max_length=128)
    lovelace: int = Field(sa_type=BigInteger)
    script: str | None = Field(
        default=None, max_length=8, description="escrow, bond, channel or none"
    )
    datum: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    spent_by: str | None = Field(default=None, max_length=64)
    spent_slot: int | None = Field(default=None, sa_type=BigInteger)


class ReputationKind(StrEnum):
    """How an escrow or a bond of a provider ended, as the chain shows it: settled for some
    units (delivered) or none (failed: a zero-unit receipt), refunded to its renter after the
    close (not delivered), cancelled by both, or a bond slashed."""

    DELIVERED = "delivered"
    FAILED = "failed"
    REFUNDED = "refunded"
    CANCELLED = "cancelled"
    SLASHED = "slashed"


class ReputationEvent(SQLModel, table=True):
    """One ending of one escrow (or a bond's slash) of a provider, in the block that holds it:
    written by the chain index, deleted by its rollback."""

    __table_args__ = (Index("ix_reputationevent_provider_slot", "provider_id", "slot"),)

    id: int | None = Field(default=None, primary_key=True)
    provider_id: str = Field(max_length=56, description="blake2b-224 of the datum's vkey")
    kind: ReputationKind = _name()
    subject: str = Field(max_length=80, description="the escrow (a slash: the bond), TXID#IX")
    tx_id: str = Field(max_length=64)
    slot: int = _big(index=True)


class ProviderReputation(SQLModel, table=True):
    """Each provider's ReputationEvents counted by kind, kept with them (matching reads one
    row per offer, never the events)."""

    provider_id: str = Field(primary_key=True, max_length=56)
    delivered: int = 0
    failed: int = 0
    refunded: int = 0
    cancelled: int = 0
    slashed: int = 0
