"""A deployment file's network and channel script, read with the standard library alone: all a
renter needs to sign IOUs and control requests (`unchained endpoint call`, `pod`), without
pydantic or pycardano, which take a tenth of a second and a second to import.
`offchain.protocol.tx.deployment_file` reads the whole file and checks it on chain."""

from __future__ import annotations

import json
from pathlib import Path

from offchain.core.errors import UnchainedError

SCRIPT_HASH_BYTES = 28
ENTERPRISE_BYTES = 1 + SCRIPT_HASH_BYTES  # a header and a payment credential: no stake part
SCRIPT_UNSTAKED, SCRIPT_KEY_STAKED, SCRIPT_SCRIPT_STAKED = 0x70, 0x10, 0x30  # CIP-19 headers


class DeploymentFileError(UnchainedError, ValueError):
    """The deployment file cannot be used; the message says why and what to do."""


def channel_script(path: Path) -> tuple[int, bytes]:
    """The network id and the channel script's hash the deployment file at `path` names;
    DeploymentFileError when there is no file there or it names no such pair."""
    try:
        record = json.loads(path.read_bytes())
        network_id, channel_hash = record["network_id"], bytes.fromhex(record["channel_hash"])
    except FileNotFoundError as exc:
        raise DeploymentFileError(f"no deployment file at {path}: pass the one the channel "
                                  "was opened with (--deployment)") from exc  # fmt: skip
    except (ValueError, KeyError, TypeError) as exc:  # not JSON, a field missing or not hex
        raise DeploymentFileError(f"{path} is not a deployment file: {exc!r}") from exc
    if type(network_id) is not int or len(channel_hash) != SCRIPT_HASH_BYTES:
        raise DeploymentFileError(f"{path} is not a deployment file: network_id "
                                  f"{network_id!r}, channel_hash of {len(channel_hash)} bytes, "
                                  f"not {SCRIPT_HASH_BYTES}")  # fmt: skip
    return network_id, channel_hash


def channel_address_bytes(network_id: int, channel_hash: bytes, renter: bytes) -> bytes:
    """A renter's channel address (CIP-19 bytes): the channel script, staked as the renter's
    address `renter` (its bytes) is, as `Deployment.channel_address` builds it."""
    if len(renter) == ENTERPRISE_BYTES:
        return bytes([SCRIPT_UNSTAKED | network_id]) + channel_hash
    key_staked = renter[0] >> 4 in (0, 1)  # a base address whose stake part is a key's
    header = SCRIPT_KEY_STAKED if key_staked else SCRIPT_SCRIPT_STAKED
    return bytes([header | network_id]) + channel_hash + renter[ENTERPRISE_BYTES:]
