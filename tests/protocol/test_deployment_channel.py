"""`deployment_channel.channel_script`: a deployment file's network and channel script read with
the standard library alone (what a renter signs IOUs for), the same values pydantic reads, and
a file that names no such pair refused with what is wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from offchain.protocol.tx.deployment_channel import DeploymentFileError, channel_script
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
