"""A renter's registry accounts read from a docker config file: `auth` (base64 user:password)
or its fields, hosts as docker writes them, an account found for an image's registry (a bare
name's: the default registry's), and a file that is not one refused by name."""

from __future__ import annotations

import base64
import json

import pytest

from consumer.sdk.errors import ConsumerError
from consumer.sdk.registry_login import RegistryLogins
from offchain.protocol.job.registry_auth import Credentials


def test_accounts_are_read_as_docker_login_writes_them(tmp_path):
    config = tmp_path / "config.json"
    auth = base64.b64encode(b"renter:pa:ss").decode()
    config.write_text(json.dumps({"auths": {
        "https://registry.example:5000/v1/": {"auth": auth},
        "other.example": {"username": "bot", "password": "token"},
    }}))  # fmt: skip
    logins = RegistryLogins.read(config)
    found = logins.for_image("registry.example:5000/team/model:v3", None)
    assert found == ("registry.example:5000", Credentials("renter", "pa:ss"))
    assert logins.for_image("team/model:v3", "registry.example:5000") == found  # bare name
    assert logins.for_image("other.example/a:1", None) == (
        "other.example",
        Credentials("bot", "token"),
    )
    assert logins.for_image("third.example/a:1", None) is None
    assert "pa:ss" not in repr(logins)


@pytest.mark.parametrize("text", ["not json", '{"auths": {"h": {"auth": "bm9jb2xvbg=="}}}',
                                  '{"auths": {"h": {}}}', "[]"])  # fmt: skip
def test_a_file_that_is_not_a_docker_config_is_refused_by_name(tmp_path, text):
    config = tmp_path / "config.json"
    config.write_text(text)
    with pytest.raises(ConsumerError, match=f"{config} is not a docker config file"):
        RegistryLogins.read(config)
