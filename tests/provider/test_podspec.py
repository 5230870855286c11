"""`kind: pod` beside jobs and services: the same YAML, read and digested the same way; its one
SSH key is checked to be one OpenSSH public key line (keys made by Debian's ssh-keygen pass,
anything that could add a line or an option to authorized_keys does not)."""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path

import pytest

from offchain.protocol.job.jobspec import (
    DEFAULT_POD_IMAGE,
    JobSpecError,
    PodSpec,
    parse_jobspec,
    parse_podspec,
    parse_servicespec,
    parse_spec,
)


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> dict[str, str]:
    """A public key line of each type, from ssh-keygen."""
    folder = tmp_path_factory.mktemp("keys")
    made = {}
    for kind, size in (("ed25519", []), ("rsa", ["-b", "2048"]), ("ecdsa", ["-b", "384"])):
        path = folder / kind
        subprocess.run(["ssh-keygen", "-q", "-t", kind, *size, "-N", "", "-C", f"me@{kind}",
                        "-f", str(path)], check=True)  # fmt: skip
        made[kind] = Path(f"{path}.pub").read_text().strip()
    return made


def pod(key: str, **changes: object) -> dict:
    return {"kind": "pod", "ssh_key": key, "price_per_second": 3, **changes}


def test_a_minimal_pod_spec_gets_the_pod_image_one_small_bundle_and_an_hour_of_workspace(keys):
    spec = parse_spec(pod(keys["ed25519"]))
    assert isinstance(spec, PodSpec)
    assert (spec.image, spec.workspace_keep_s) == (DEFAULT_POD_IMAGE, 3600)
    assert spec.price_per_second == 3
    assert spec.resources.gpus == 0 and spec.resources.cpu_cores == 1
    assert parse_podspec(pod(keys["ed25519"], resources={"gpus": 2})).resources.gpus == 2


@pytest.mark.parametrize("kind", ["ed25519", "rsa", "ecdsa"])
def test_every_key_type_ssh_keygen_makes_is_taken_as_written(keys, kind):
    spec = parse_podspec(pod(keys[kind]))
    assert spec.ssh_key == keys[kind] and spec.ssh_key.endswith(f"me@{kind}")
    assert parse_podspec(pod(keys[kind] + "\n")).ssh_key == keys[kind]  # a .pub file's newline


def test_the_digest_covers_the_kind_the_key_and_every_default(keys):
    spec = parse_podspec(pod(keys["ed25519"]))
    body = json.loads(spec.canonical_json())
    assert body["kind"] == "pod" and body["workspace_keep_s"] == 3600
    assert body["image"] == DEFAULT_POD_IMAGE and body["resources"]["memory_mib"] == 512
    assert spec.pod_id() == parse_podspec(dict(reversed(pod(keys["ed25519"]).items()))).pod_id()
    assert parse_podspec(pod(keys["rsa"])).pod_id() != spec.pod_id()
    assert PodSpec.model_validate_json(spec.model_dump_json()) == spec


def test_each_kind_parses_only_as_itself(keys):
    with pytest.raises(JobSpecError, match="kind: pod: this is a pod spec, not a job"):
        parse_jobspec(pod(keys["ed25519"]))
    with pytest.raises(JobSpecError, match="a service spec says kind: service"):
        parse_servicespec(pod(keys["ed25519"]))
    with pytest.raises(JobSpecError, match="a pod spec says kind: pod"):
        parse_podspec({"kind": "service", "image": "a", "port": 1, "price_per_second": 1})


def _blob(kind: bytes, body: bytes = b"\x00\x00\x00\x01x") -> str:
    return base64.b64encode(len(kind).to_bytes(4, "big") + kind + body).decode()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"price_per_second": 0}, "price_per_second: Input should be greater than or equal to 1"),
        ({"workspace_keep_s": -1}, "workspace_keep_s: Input should be greater than or equal to 0"),
        ({"workspace_keep_s": 30 * 86400 + 1}, "workspace_keep_s: Input should be less than"),
        ({"image": "Not An Image"}, "image: not a docker image reference"),
        ({"port": 22}, "port: unknown field"),
        ({"resources": {"disk_mib": 1}}, "resources.disk_mib: unknown field"),
        ({"ssh_key": ""}, "ssh_key: must be one line of printable ASCII"),
        ({"ssh_key": "ssh-ed25519 AAAA\nssh-rsa AAAA"}, "ssh_key: must be one line"),
        ({"ssh_key": "x" * 9000}, "at most 8192 characters"),
        (
            {"ssh_key": 'command="sh" ssh-ed25519 ' + _blob(b"ssh-ed25519")},
            "ssh_key: must start with the key's type",
        ),
        ({"ssh_key": "ssh-dss " + _blob(b"ssh-dss")}, "must start with the key's type"),
        ({"ssh_key": "ssh-ed25519 not*base64"}, "ssh_key: the key is not valid base64"),
        ({"ssh_key": "ssh-ed25519 " + _blob(b"ssh-rsa")}, "the key's data is not a ssh-ed25519"),
        ({"ssh_key": "ssh-ed25519 " + _blob(b"ssh-ed25519", b"")}, "not a ssh-ed25519 key"),
    ],
)
def test_what_is_refused_is_named(keys, change, message):
    with pytest.raises(JobSpecError, match=message.replace("(", r"\(")):
        parse_podspec({**pod(keys["ed25519"]), **change})


def test_the_key_is_required():
    with pytest.raises(JobSpecError, match="ssh_key: required field is missing"):
        parse_podspec({"kind": "pod", "price_per_second": 1})
