"""The devnet's settings: flags, then `UNCHAINED_DEVNET_*` environment variables, then a TOML
file (`--config`), then these defaults (`offchain.core.settings`). The file may also override
protocol parameters:

    slot_length = 1000
    [protocol_parameters]
    max_block_memory = 72_000_000

`profile` says how blocks come: `instant` (a block on the next slot that has transactions
waiting, no forks: quick tests and demos) or `realistic` (Praos: a block in a slot with
probability `active_slot_coeff`, and forks of depth 1..`fork_depth_max` after a share
`fork_rate` of the blocks, all drawn from `seed`). The knobs default to the profile's values.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, model_validator
from pydantic_settings import SettingsConfigDict

from devnet.praos import Praos
from offchain.core.settings import LayeredSettings

Profile = Literal["instant", "realistic"]
MAINNET_ACTIVE_SLOT_COEFF = Fraction(1, 20)  # mainnet's shelley-genesis.json: activeSlotsCoeff
# Realistic forks: mainnet orphans a few blocks in a hundred, nearly all one deep (slot and
# height battles); the profile forks more often, and two deep, so that tests meet them.
REALISTIC_FORK_RATE = Fraction(1, 20)
REALISTIC_FORK_DEPTH_MAX = 2
PRAOS_KNOBS = ("active_slot_coeff", "fork_rate", "fork_depth_max")


def _exact(value: Any) -> Any:
    """A probability given as a TOML or JSON number means its decimal text (0.05 is 1/20)."""
    return Fraction(repr(value)) if isinstance(value, float) else value


Probability = Annotated[Fraction, BeforeValidator(_exact), Field(ge=0, le=1)]


class DevnetSettings(LayeredSettings):
    """Where the devnet listens, where its chain lives, and its clock and ledger rules."""

    model_config = SettingsConfigDict(env_prefix="UNCHAINED_DEVNET_")

    host: str = Field("127.0.0.1", description="Address the Ogmios server listens on.")
    port: int = Field(1337, description="Its port (WebSocket and HTTP).")
    data_dir: Path = Field(Path("data/devnet"), description="The chain and the wallet keys.")
    slot_length: int = Field(1000, ge=1, description="Milliseconds a slot lasts.")
    profile: Profile = Field(
        "instant", description="instant: a block as soon as transactions wait; realistic: Praos."
    )
    active_slot_coeff: Probability | None = Field(
        None, description="realistic: the share of slots with a block [default: 1/20, mainnet's]."
    )
    fork_rate: Probability | None = Field(
        None, description="realistic: the share of blocks a fork takes back [default: 1/20]."
    )
    fork_depth_max: int | None = Field(
        None, ge=1, description="realistic: a fork's greatest depth in blocks [default: 2]."
    )
    seed: int = Field(0, description="realistic: the seed every leader and fork draw comes from.")
    protocol_parameters: dict[str, Any] = Field(
        default_factory=dict, description="ProtocolParameters fields to replace, by name."
    )

    @model_validator(mode="after")
    def _knobs_need_realistic(self) -> DevnetSettings:
        given = [name for name in PRAOS_KNOBS if getattr(self, name) is not None]
        if given and self.profile != "realistic":
            raise ValueError(f"{', '.join(given)} apply to profile 'realistic' only")
        if self.active_slot_coeff == 0:
            raise ValueError("active_slot_coeff 0 would never make a block")
        return self

    def praos(self) -> Praos | None:
        """The realistic profile's block production, its knobs filled from the profile."""
        if self.profile != "realistic":
            return None
        return Praos(
            active_slot_coeff=self.active_slot_coeff or MAINNET_ACTIVE_SLOT_COEFF,
            fork_rate=REALISTIC_FORK_RATE if self.fork_rate is None else self.fork_rate,
            fork_depth_max=self.fork_depth_max or REALISTIC_FORK_DEPTH_MAX,
            seed=self.seed,
        )
