"""`deployment_channel.channel_script`: a deployment file's network and channel script read with
the standard library alone (what a renter signs IOUs for), the same values pydantic reads, and
a file that names no such pair refused with what is wrong."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from pycardano import Address, Network, PaymentSigningKey, ScriptHash, StakeSigningKey

from offchain.protocol.tx.deployment import Deployment
from offchain.protocol.tx.deployment_channel import (
    DeploymentFileError,
    channel_address_bytes,
    channel_script,
)
from tests.consumer.test_endpoint_cli import write_deployment


def test_the_network_and_channel_script_are_the_files(tmp_path: Path):
    write_deployment(tmp_path / "deployment.json", 1, bytes(range(28)))
    assert channel_script(tmp_path / "deployment.json") == (1, bytes(range(28)))


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (None, "no deployment file at"),
        ("not json", "is not a deployment file: JSONDecodeError"),
        ('{"network_id": 0}', "is not a deployment file: KeyError"),
        ('{"network_id": 0, "channel_hash": "zz"}', "is not a deployment file: ValueError"),
        ('{"network_id": 0, "channel_hash": "00"}', "channel_hash of 1 bytes, not 28"),
        ('{"network_id": "0", "channel_hash": "' + "00" * 28 + '"}', "network_id '0'"),
        ("[]", "is not a deployment file: TypeError"),
    ],
)
def test_a_file_naming_no_channel_script_is_refused(text: str | None, why: str, tmp_path: Path):
    path = tmp_path / "deployment.json"
    if text is not None:
        path.write_text(text)
    with pytest.raises(DeploymentFileError, match=why):
        channel_script(path)


@pytest.mark.parametrize("network", [Network.TESTNET, Network.MAINNET])
@pytest.mark.parametrize("staked", [False, True])
def test_a_renters_channel_address_is_the_one_pycardano_builds(network: Network, staked: bool):
    payment, stake = PaymentSigningKey.generate(), StakeSigningKey.generate()
    stake_part = stake.to_verification_key().hash() if staked else None
    renter = Address(payment.to_verification_key().hash(), stake_part, network=network)
    channel_hash = bytes(range(28))
    deployment = SimpleNamespace(channel_hash=ScriptHash(channel_hash), network=network)
    expected = Deployment.channel_address(deployment, renter)  # type: ignore[arg-type]
    made = channel_address_bytes(network.value, channel_hash, renter.to_primitive())
    assert made == expected.to_primitive()
