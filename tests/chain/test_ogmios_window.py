"""The Ogmios version window and the CBOR flag, checked at start: our devnet passes; versions
and flags we cannot run here are served by a labelled stand-in (`ogmios_standin`), a real
WebSocket server answering as that Ogmios would, and refused with what to change."""

from __future__ import annotations

import pytest
from pycardano import ScriptHash

from offchain.chain.context import chain_context
from offchain.chain.network import ChainNetwork, NetworkMismatch, parse_network
from offchain.chain.ogmios_window import (
    OgmiosSetupError,
    OgmiosVersion,
    health_url,
    parse_version,
    reward_balances,
)
from offchain.chain.startup import check_start
from tests.chain.ogmios_standin import BEFORE, Running, StandIn

DEVNET = parse_network("devnet")
SCRIPT = "5a" * 28


def test_versions_read_as_ogmios_and_our_devnet_write_them():
    assert parse_version("v6.14.0") == OgmiosVersion(6, 14, 0)
    assert parse_version("v6.14.0 (unchained devnet)") == OgmiosVersion(6, 14, 0)
    assert parse_version("6.9") == OgmiosVersion(6, 9, 0)
    with pytest.raises(OgmiosSetupError, match=r"'nightly', which names no version: run"):
        parse_version("nightly")
    assert health_url("ws://node:1337") == "http://node:1337/health"
    assert health_url("wss://ogmios.example/v6/") == "https://ogmios.example/v6/health"


def test_the_devnet_passes_the_start_checks_as_ogmios_6_14(devnet):
    assert check_start(devnet.url, DEVNET) == OgmiosVersion(6, 14, 0)


def test_a_newer_ogmios_is_refused_saying_which_to_run():
    with Running(StandIn("v7.0.0")) as ogmios, pytest.raises(OgmiosSetupError) as refused:
        check_start(ogmios.url, DEVNET)
    message = str(refused.value)
    assert "Ogmios 7.0.0 is newer than Unchained supports" in message
    assert "maxReferenceScriptsSize" in message and "run Ogmios 6.x" in message


def test_an_ogmios_older_than_v6_is_refused_saying_to_upgrade():
    with Running(StandIn("v5.6.0")) as ogmios, pytest.raises(OgmiosSetupError) as refused:
        check_start(ogmios.url, DEVNET)
    assert "Ogmios 5.6.0 is older than the v6 protocol" in str(refused.value)
    assert "upgrade to Ogmios 6.x" in str(refused.value)


@pytest.mark.parametrize("version", ["v6.12.1", "v6.13.0"])
def test_reward_summaries_read_in_both_shapes_of_the_window(version):
    """6.12 answers a map keyed by credential, 6.13 a list naming each credential: a settle
    withdraws exactly the balance either way; an unregistered credential is None in both."""
    with Running(StandIn(version, rewards={SCRIPT: 7_000_123})) as ogmios:
        assert check_start(ogmios.url, DEVNET) == parse_version(version)
        context = chain_context(ogmios.url)
        assert context.script_reward_balance(ScriptHash(bytes.fromhex(SCRIPT))) == 7_000_123
        assert context.script_reward_balance(ScriptHash(bytes(28))) is None


def test_reward_balances_of_each_shape():
    value = {"ada": {"lovelace": 5}}
    listed = [{"from": "script", "credential": SCRIPT, "rewards": value, "deposit": value}]
    mapped = {SCRIPT: {"delegate": {"id": "pool1"}, "rewards": value, "deposit": value}}
    assert reward_balances(listed) == reward_balances(mapped) == {SCRIPT: 5}
    assert reward_balances([]) == reward_balances({}) == {}


def test_an_ogmios_without_include_cbor_is_refused_at_start_saying_which_flag():
    """Without the flag every search for a spending transaction would fail for ever."""
    with Running(StandIn("v6.14.0", include_cbor=False)) as ogmios:
        with pytest.raises(OgmiosSetupError) as refused:
            check_start(ogmios.url, DEVNET, since=BEFORE)
        assert "restart Ogmios with --include-cbor" in str(refused.value)
        assert check_start(ogmios.url, DEVNET) == OgmiosVersion(6, 14, 0)  # no point: not asked
    with Running(StandIn("v6.14.0", include_cbor=True)) as ogmios:
        assert check_start(ogmios.url, DEVNET, since=BEFORE) == OgmiosVersion(6, 14, 0)


def test_a_node_of_another_network_is_refused_naming_both():
    with Running(StandIn("v6.14.0", magic=1)) as ogmios, pytest.raises(NetworkMismatch) as refused:
        check_start(ogmios.url, DEVNET)
    assert f"the node behind {ogmios.url} runs preprod (magic 1)" in str(refused.value)
    assert "the network setting is devnet (magic 42)" in str(refused.value)
    with Running(StandIn("v6.14.0", magic=4_242)) as ogmios:
        assert check_start(ogmios.url, ChainNetwork(4_242)) == OgmiosVersion(6, 14, 0)
