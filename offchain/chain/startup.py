"""What every command that signs checks first: Ogmios answers, in the supported version
window, its node runs the network the setting names, and (for a process that follows the
chain) Ogmios sends each transaction's CBOR. Each refusal says what to change."""

from __future__ import annotations

import asyncio
from typing import Any

from offchain.chain.network import ChainNetwork, connect
from offchain.chain.ogmios_window import OgmiosVersion, check_cbor, ogmios_version, read_health


def check_start(
    url: str, network: ChainNetwork, since: dict[str, Any] | None = None
) -> OgmiosVersion:
    """Ogmios's version, once the checks passed: OgmiosSetupError or NetworkMismatch saying
    what to change, ConnectionError when nothing answers at `url`. `since`, a point before a
    known transaction (a deployment's), has the CBOR flag checked there."""
    version = ogmios_version(read_health(url))
    connect(url, network)
    if since is not None:
        asyncio.run(check_cbor(url, since))
    return version
