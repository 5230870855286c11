"""The one network setting (`mainnet`, `preprod`, `preview`, `devnet` or a custom magic) and
its checks against the node and the deployment file, made before anything is signed.

A network is its magic: the number the node's genesis carries and the handshake checks. Two
test networks share network id 0 (and so their addresses look alike), so the id alone cannot
tell preprod from preview or the devnet; the magic can. An operator must name the network
(the default is the devnet): a node or a deployment file of another network is refused with
a message naming both, so a mainnet key never signs for a setting that meant a test chain.

Only the error root is imported here: a CLI reads the setting before it loads any client."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

from offchain.core.errors import UnchainedError

if TYPE_CHECKING:
    from pycardano import Network

MAINNET_MAGIC = 764824073
# The public networks' magics (their genesis files), and the devnet's own (devnet/genesis.py
# takes it from here).
MAGICS = {"mainnet": MAINNET_MAGIC, "preprod": 1, "preview": 2, "devnet": 42}
DEFAULT_NETWORK = "devnet"
SETTING_HELP = "mainnet, preprod, preview, devnet, or a custom network's magic (a number)."


class NetworkSettingError(UnchainedError, ValueError):
    """The network setting names no network."""


class NetworkMismatch(UnchainedError):
    """The node or the deployment file is of another network than the setting names."""


@dataclasses.dataclass(frozen=True)
class ChainNetwork:
    """A Cardano network, known by its magic."""

    magic: int

    @property
    def name(self) -> str:
        """Its usual name, or `magic N` for a custom network."""
        return next((n for n, m in MAGICS.items() if m == self.magic), f"magic {self.magic}")

    @property
    def network_id(self) -> int:
        """The id addresses carry: 1 on mainnet, 0 on every test network."""
        return 1 if self.magic == MAINNET_MAGIC else 0

    @property
    def pycardano(self) -> Network:
        """pycardano's network of its addresses."""
        from pycardano import Network

        return Network.MAINNET if self.network_id == 1 else Network.TESTNET

    def __str__(self) -> str:
        return self.name if self.name.startswith("magic") else f"{self.name} (magic {self.magic})"


def parse_network(text: str) -> ChainNetwork:
    """The network `text` names; NetworkSettingError saying what is accepted otherwise."""
    value = text.strip().lower()
    if value in MAGICS:
        return ChainNetwork(MAGICS[value])
    if value.isdigit() and 0 < int(value) < 2**32:
        return ChainNetwork(int(value))
    hint = (
        ": testnet names no single network (preprod, preview and the devnet all use "
        "testnet addresses); name the one you mean"
        if value == "testnet"
        else ""
    )
    raise NetworkSettingError(f"network {text!r} is not one of: {SETTING_HELP}{hint}")


def node_network(url: str) -> ChainNetwork:
    """The network of the node behind Ogmios at `url`: its Shelley genesis's magic."""
    from offchain.chain.ogmios import request_sync

    genesis = request_sync(url, "queryNetwork/genesisConfiguration", {"era": "shelley"})
    return ChainNetwork(int(genesis["networkMagic"]))


def check_node(setting: ChainNetwork, node: ChainNetwork, url: str) -> None:
    """NetworkMismatch when the node runs another network than the setting names."""
    if node != setting:
        raise NetworkMismatch(
            f"the node behind {url} runs {node}, but the network setting is {setting}: set "
            f"--network (or UNCHAINED_NETWORK) to {node.name.removeprefix('magic ')}, or "
            f"point --ogmios-url at a {setting.name} node"
        )


def connect(url: str, setting: ChainNetwork) -> ChainNetwork:
    """Check that the node at `url` runs the network of `setting` (raises NetworkMismatch,
    or the connection's error when Ogmios cannot be reached); returns it."""
    check_node(setting, node_network(url), url)
    return setting


def check_deployment(
    setting: ChainNetwork,
    network_id: int,
    magic: int | None,
    path: Path,
    setting_is: str = "the network setting is",
) -> None:
    """NetworkMismatch when the deployment file at `path` was made for another network than
    `setting` (its magic when it records one, else its network id)."""
    if magic is not None and magic != setting.magic:
        where = str(ChainNetwork(magic))
    elif network_id != setting.network_id:
        mainnet = network_id == 1
        where = (
            str(ChainNetwork(MAINNET_MAGIC))
            if mainnet
            else f"a test network (network id {network_id})"
        )
    else:
        return
    raise NetworkMismatch(
        f"{path} was deployed on {where}, but {setting_is} {setting}: pass the "
        f"deployment made on {setting.name}, or deploy there"
    )
