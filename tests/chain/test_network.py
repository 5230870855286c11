"""The one network setting: what it accepts, the devnet's own magic read from the devnet's
genesis over its WebSocket, and refusals that name both sides."""

from __future__ import annotations

from pathlib import Path

import pytest
from pycardano import Network

from offchain.chain.network import (
    MAINNET_MAGIC,
    ChainNetwork,
    NetworkMismatch,
    NetworkSettingError,
    check_deployment,
    check_node,
    connect,
    node_network,
    parse_network,
)

FILE = Path("deployment.json")


def test_the_setting_names_a_known_network_or_a_magic():
    assert parse_network("mainnet") == ChainNetwork(MAINNET_MAGIC)
    assert parse_network(" Preprod ") == ChainNetwork(1)
    assert parse_network("preview") == ChainNetwork(2)
    assert parse_network("devnet") == parse_network("42") == ChainNetwork(42)
    custom = parse_network("4242")
    assert (custom.name, str(custom), custom.network_id) == ("magic 4242", "magic 4242", 0)
    assert (
        parse_network("mainnet").pycardano is Network.MAINNET
        and str(parse_network("mainnet")) == "mainnet (magic 764824073)"
    )
    assert parse_network("preprod").pycardano is Network.TESTNET


@pytest.mark.parametrize("text", ["testnet", "sanchonet ", "0", "-1", "4294967296", "", "1.5"])
def test_anything_else_is_refused_saying_what_is_accepted(text):
    with pytest.raises(NetworkSettingError, match="is not one of: mainnet, preprod, preview"):
        parse_network(text)


def test_testnet_is_refused_because_it_names_no_single_network():
    with pytest.raises(NetworkSettingError, match="testnet names no single network"):
        parse_network("testnet")


def test_the_devnet_reports_its_own_magic_and_is_accepted_as_devnet(devnet):
    assert node_network(devnet.url) == ChainNetwork(42)
    assert connect(devnet.url, parse_network("devnet")) == ChainNetwork(42)
    with pytest.raises(NetworkMismatch) as refused:
        connect(devnet.url, parse_network("mainnet"))
    assert str(refused.value) == (
        f"the node behind {devnet.url} runs devnet (magic 42), but the network setting is "
        "mainnet (magic 764824073): set --network (or UNCHAINED_NETWORK) to devnet, or point "
        "--ogmios-url at a mainnet node"
    )


def test_a_custom_magic_mismatch_says_the_number_to_set():
    with pytest.raises(NetworkMismatch, match=r"to 7, or point --ogmios-url at a preview node"):
        check_node(parse_network("preview"), ChainNetwork(7), "ws://node:1337")


def test_a_deployment_of_another_network_is_refused_by_magic_or_by_id():
    preprod = parse_network("preprod")
    check_deployment(preprod, 0, 1, FILE)
    check_deployment(preprod, 0, None, FILE)  # an older file: its id agrees, nothing to tell
    with pytest.raises(NetworkMismatch) as refused:
        check_deployment(preprod, 0, 2, FILE)
    assert str(refused.value) == (
        "deployment.json was deployed on preview (magic 2), but the network setting is preprod "
        "(magic 1): pass the deployment made on preprod, or deploy there"
    )
    with pytest.raises(NetworkMismatch, match=r"deployed on a test network \(network id 0\)"):
        check_deployment(parse_network("mainnet"), 0, None, FILE)
    with pytest.raises(NetworkMismatch, match=r"deployed on mainnet \(magic 764824073\)"):
        check_deployment(preprod, 1, None, FILE)
