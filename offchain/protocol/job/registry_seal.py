"""A renter's registry account sealed to the one provider that runs its job: libsodium's sealed
box (X25519 and XSalsa20-Poly1305, PyNaCl) to the provider's ed25519 key turned into its X25519
twin, the key its offer and quote name. Only the holder of the provider's signing key opens it:
the market and the explorer carry and store ciphertext they cannot read.

The sealed text names the registry host the account is for, and the provider sends it to that
registry only (`for_image`): a renter's account never reaches another registry."""

from __future__ import annotations

import base64
import binascii
import json

import nacl.exceptions
import nacl.public
import nacl.signing

from offchain.core.errors import UnchainedError
from offchain.protocol.job.registry_auth import Credentials

MAX_SEALED_CHARS = 4096  # a host and an account, sealed and in base64: a few hundred chars


class SealError(UnchainedError):
    """A sealed account that cannot be opened with this key, or is not one."""


def seal(registry: str, credentials: Credentials, provider_vkey: bytes) -> str:
    """The account for `registry` (host[:port]) sealed to the provider's 32-byte ed25519 key,
    in base64."""
    box = nacl.public.SealedBox(nacl.signing.VerifyKey(provider_vkey).to_curve25519_public_key())
    plain = {"registry": registry, "username": credentials.username,
             "password": credentials.password}  # fmt: skip
    return base64.b64encode(box.encrypt(json.dumps(plain).encode())).decode()


def unseal(sealed: str, provider_seed: bytes) -> tuple[str, Credentials]:
    """The registry host and account sealed to the provider whose signing key is the 32-byte
    `provider_seed`; SealError when it was sealed to another key or is not an account."""
    box = nacl.public.SealedBox(nacl.signing.SigningKey(provider_seed).to_curve25519_private_key())
    try:
        plain = json.loads(box.decrypt(base64.b64decode(sealed, validate=True)))
        return plain["registry"], Credentials(plain["username"], plain["password"])
    except (nacl.exceptions.CryptoError, binascii.Error, ValueError, KeyError, TypeError) as exc:
        raise SealError("the registry account is not sealed to this provider's key") from exc


def for_image(host: str | None, registry: str, credentials: Credentials) -> dict[str, str] | None:
    """docker's `auth_config` for a pull from `host` (an image's registry), or None when the
    account is for another registry (it is not sent there)."""
    if host != registry:
        return None
    return {"username": credentials.username, "password": credentials.password}
