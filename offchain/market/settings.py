"""The market's settings: one model, filled from flags, then `UNCHAINED_MARKET_*` environment
variables (and the usual `DATABASE_URL`), then a TOML file, then the defaults (the project's
order for every process, `offchain.core.settings`).

Money is integer lovelace and time integer ms. Paths are made absolute once, as they are read:
a relative path in the TOML file is read from the file's folder, one from a flag, the
environment or a default from the working directory, so nothing later depends on where the
service was started.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import SettingsConfigDict
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from contracts import SETTLE_BATCH_MAX
from offchain.chain import DEFAULT_OGMIOS_URL
from offchain.core.settings import LayeredSettings, SettingsFileError
from offchain.market.database_url import engine_url
from offchain.market.errors import Invalid
from offchain.protocol.job.jobspec import describe

ENV_PREFIX = "UNCHAINED_MARKET_"
MIB = 1 << 20
# Crash-safety tests: the process SIGKILLs itself at the named point (never set in production).
CRASH_POINTS = Literal["", "receipt-received", "settlement-built", "settlement-submitted"]


class MarketSettings(LayeredSettings):
    """Everything the service reads at start; the defaults run a devnet market."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX)
    # the name hosting platforms and most tools use, below the market's own
    env_aliases: ClassVar[Mapping[str, str]] = {"DATABASE_URL": "database_url"}

    data_dir: Path = Field(Path("data/market"), description="SQLite file, blobs, logs.")
    database_url: str = Field(
        "", description="SQLAlchemy URL, or a libpq one (several hosts: whichever is the "
        "primary, with target_session_attrs=read-write); empty: SQLite under data_dir.",
    )  # fmt: skip
    ogmios_url: str = Field(DEFAULT_OGMIOS_URL, description="The chain: an Ogmios v6 WebSocket.")
    deployment: Path = Field(Path("data/deployment.json"), description="The protocol's file.")
    identity: str = Field(
        "unchained-market", min_length=1, description="Signed into every request to this market."
    )
    host: str = Field("127.0.0.1", description="Address the API and explorer listen on.")
    port: int = Field(8080, ge=0, le=65535, description="Port of the API and explorer.")
    body_limit_bytes: int = Field(1 * MIB, ge=1024, description="A request body past it: 413.")
    result_limit_bytes: int = Field(
        1024 * MIB, ge=1, description="A job's result archive past it: 413."
    )
    migrate: bool = Field(
        True, description="Bring the database to the newest migration at start (under a "
        "PostgreSQL advisory lock). False where `unchained market migrate` runs them once, "
        "before the hosts start.",
    )  # fmt: skip
    result_retention_ms: int = Field(
        30 * 24 * 3600_000, ge=0, description="A job's result archive, metering record and logs "
        "are deleted this long after it ended (settled, refunded, cancelled or expired); 0 "
        "keeps them.",
    )  # fmt: skip
    quote_ttl_ms: int = Field(10 * 60_000, ge=1000, description="How long a quote may be locked.")
    settle_window_ms: int = Field(
        60 * 60_000, ge=1000, description="Each escrow's time to settle after its deadline."
    )
    settle_fee_share: int = Field(
        330_000, ge=0, description="Lovelace of each quote's fee allowance, its share of a "
        "settle fee: the measured cost of a job settled alone (bench/contracts.py's "
        "settle_cost_per_job, 306,371 on the devnet; 26,504 each in a batch of 68 receipts, 15,002 "
        "in a claim of 125) plus a 7% "
        "margin, since a job may be settled alone. A quote's lock adds a return deposit, "
        "refunded (quote_terms.fit_allowance), so no settle needs a top-up.",
    )  # fmt: skip
    confirmations: int = Field(3, ge=0, description="Blocks on top before an escrow counts.")
    clock_tolerance_ms: int = Field(5 * 60_000, ge=1000, description="Request timestamp skew.")
    online_ms: int = Field(2 * 60_000, ge=1000, description="A heartbeat keeps an offer online.")
    min_bond_lovelace: int = Field(
        0, ge=0, description="An offer matches only with a counted bond of at least this much "
        "(0: no bond needed).",
    )  # fmt: skip
    long_poll_max_s: int = Field(30, ge=0, description="Longest wait of a provider's poll.")
    streams_per_client: int = Field(
        16, ge=1, description="Live streams (server-sent events) one client address may hold "
        "open at once; past it a new one is refused 429.",
    )  # fmt: skip
    streams_max: int = Field(
        1000, ge=1, description="Live streams this process holds open at once, all clients "
        "together; past it a new one is refused 503.",
    )  # fmt: skip
    wallet_key: Path | None = Field(
        None, description="The market's own payment key (.skey): it pays settlement fees and "
        "takes the fee allowances back as change. None: the market settles nothing itself.",
    )  # fmt: skip
    sweep_to: str | None = Field(
        None, description="A cold address (bech32, the deployment's network) the settlement "
        "wallet sends its surplus to: past sweep_above_lovelace, all but sweep_keep_lovelace. "
        "None: no sweep.",
    )  # fmt: skip
    sweep_above_lovelace: int = Field(
        1_000_000_000, ge=0, description="The settlement wallet's free balance past which it "
        "sweeps (with sweep_to).",
    )  # fmt: skip
    sweep_keep_lovelace: int = Field(
        100_000_000, ge=0, description="What a sweep leaves in the settlement wallet for the "
        "next fees (its own fee comes out of it).",
    )  # fmt: skip
    settle_batch_max: int = Field(
        SETTLE_BATCH_MAX, ge=1, description="Escrows per settle transaction (the contract's "
        "measured maximum).",
    )  # fmt: skip
    settle_every_ms: int = Field(2000, ge=100, description="How often the batcher runs.")
    settle_in_flight_max: int = Field(
        4, ge=1, description="Settle transactions in flight at once, each paying its fee from "
        "its own UTxO of the market's wallet (the batcher splits the wallet into this many).",
    )  # fmt: skip
    settle_wait_ms: int = Field(
        0, ge=0, description="A receipt waits up to this long for a full batch "
        "(settle_batch_max) before a smaller one is settled (0: settle at once).",
    )  # fmt: skip
    resubmit_after_ms: int = Field(
        20_000, ge=100, description="Resubmit a settle transaction not yet seen in a block."
    )
    schedule_every_ms: int = Field(
        5000, ge=100, description="Quote expiry, deadline watch and liveness run this often."
    )
    rollback_blocks: int = Field(
        2160, ge=1, description="Blocks the follower keeps undo records and points for."
    )
    leader_poll_ms: int = Field(
        1000, ge=50, description="How often a process tries to become (and checks it is) leader."
    )
    registry_timeout_ms: int = Field(
        10_000, ge=100, description="How long a quote waits for a registry to pin an image's tag."
    )
    default_registry: str = Field(
        "", description="The registry a bare image name (`python:3.12`) is read in, as docker "
        "reads it (`library/` for one-part names): a registry's host[:port], or `engine` for "
        "the one the local docker engine uses. Empty: bare names are not pinned (they name "
        "images providers have).",
    )  # fmt: skip
    local_registries: bool = Field(
        False, description="Read registries on this machine (localhost, 127.0.0.0/8) to pin "
        "an image: for a market beside its registry (tests, a demo); off, a renter cannot make "
        "the market probe its own machine's ports.",
    )  # fmt: skip
    ready_follower_lag_blocks: int = Field(
        10, ge=0, description="/ready fails while the follower is more blocks than this "
        "behind the chain's tip.",
    )  # fmt: skip
    ready_wallet_min_lovelace: int = Field(
        20_000_000, ge=0, description="/ready fails while the settler's wallet holds less "
        "(a settle's fee UTxO is 10 ADA).",
    )  # fmt: skip
    ready_timeout_ms: int = Field(
        2000, ge=50, description="How long /ready and /metrics wait for each dependency."
    )
    crash_at: CRASH_POINTS = Field("", description="Tests only: SIGKILL this process there.")

    @model_validator(mode="after")
    def _sweep_keeps_less_than_it_leaves(self) -> MarketSettings:
        if self.sweep_to is not None and self.sweep_keep_lovelace >= self.sweep_above_lovelace:
            raise ValueError("sweep_keep_lovelace must be below sweep_above_lovelace: a sweep "
                             "leaves the wallet with what it keeps")  # fmt: skip
        return self

    @field_validator("database_url")
    @classmethod
    def _readable_database_url(cls, value: str) -> str:
        """Refused at start, naming the field, rather than at the first connection."""
        if value:
            try:
                make_url(engine_url(value))
            except (ArgumentError, ValueError) as exc:
                raise ValueError(f"not a database URL: {exc}") from exc
        return value

    @property
    def sqlalchemy_url(self) -> str:
        if self.database_url:
            return engine_url(self.database_url)
        return f"sqlite:///{self.data_dir / 'market.db'}"

    @property
    def blob_dir(self) -> Path:
        return self.data_dir / "blobs"


def load_settings(
    toml: Path | None = None,
    flags: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> MarketSettings:
    """Settings from `flags` (None values are unset), the environment, the TOML file at
    `toml` (if given and present) and the defaults, in that order; Invalid names the field."""
    try:
        return MarketSettings.load(toml, flags, environ)
    except SettingsFileError as exc:
        raise Invalid(str(exc), "config") from exc
    except ValidationError as exc:
        raise Invalid(describe(exc), "settings") from exc
