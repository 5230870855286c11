"""A command's chain and deployment, opened only after the start-up checks: the deployment
file and the node are of the network the setting names, Ogmios is a supported version, and a
process that follows the chain gets transactions' CBOR. Nothing is signed before."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from offchain.chain.network import ChainNetwork, check_deployment, node_network
from offchain.chain.startup import check_start
from offchain.protocol.tx import deployment_file

if TYPE_CHECKING:
    from offchain.chain.context import OgmiosContext
    from offchain.protocol.tx.deployment import Deployment


def open_checked(
    url: str, path: Path, network: ChainNetwork, *, follows: bool = False
) -> tuple[OgmiosContext, Deployment]:
    """A chain context for `url` building `network`'s addresses, and the deployment at
    `path` read against it. Raises DeploymentFileError, NetworkMismatch or OgmiosSetupError
    (each saying what to change), or the connection's error when Ogmios does not answer."""
    from offchain.chain.context import chain_context

    record = deployment_file.read_record(path)
    check_deployment(network, record.network_id, record.network_magic, path)
    check_start(url, network, record.published_after if follows else None)
    context = chain_context(url, network.pycardano)
    return context, deployment_file.load(path, context)


def check_follower(url: str, path: Path) -> ChainNetwork:
    """The start-up checks of a process that follows the chain for a deployment and has no
    network setting of its own (the market): the file was made on the node's network, Ogmios
    is in the version window and sends transactions' CBOR. Returns the node's network; raises
    as `open_checked`."""
    record = deployment_file.read_record(path)
    node = node_network(url)
    check_deployment(node, record.network_id, record.network_magic, path, "the node runs")
    check_start(url, node, record.published_after)
    return node
