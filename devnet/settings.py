"""The devnet's settings: flags, then `UNCHAINED_DEVNET_*` environment variables, then a TOML
file (`--config`), then these defaults (`offchain.core.settings`). The file may also override
protocol parameters:

    slot_length = 1000
    [protocol_parameters]
    max_block_memory = 72_000_000
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from offchain.core.settings import LayeredSettings


class DevnetSettings(LayeredSettings):
    """Where the devnet listens, where its chain lives, and its clock and ledger rules."""

    model_config = SettingsConfigDict(env_prefix="UNCHAINED_DEVNET_")

    host: str = Field("127.0.0.1", description="Address the Ogmios server listens on.")
    port: int = Field(1337, description="Its port (WebSocket and HTTP).")
    data_dir: Path = Field(Path("data/devnet"), description="The chain and the wallet keys.")
    slot_length: int = Field(1000, description="Milliseconds a slot lasts.")
    protocol_parameters: dict[str, Any] = Field(
        default_factory=dict, description="ProtocolParameters fields to replace, by name."
    )
