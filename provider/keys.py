"""The provider's signing key: one ed25519 key in the state directory, as a cardano-cli `.skey`
envelope (PaymentSigningKeyShelley_ed25519), so the operator can inspect or move it with the
usual Cardano tools, or that envelope sealed with a passphrase (`unchained key seal`,
`offchain.core.sealed_keys`). It signs acceptances, receipts, claims, settles and top-ups of
the bond. The provider is paid at, and its bond is owned by, its payout address: the key's own
by default, or a cold wallet's (`daemon.payout_address`) whose key never comes to this machine,
so that a stolen hot key can neither redirect the earnings nor take the bond.
"""

from __future__ import annotations

import os
from pathlib import Path

from cbor2 import CBORError
from pycardano import Address, Network, PaymentSigningKey
from pycardano.exception import InvalidKeyTypeException

from offchain.core.sealed_keys import KeyFileError, read_key_text
from offchain.protocol.ledger.addresses import key_address
from provider.config import ConfigError

KEY_FILE = "provider.skey"
SEED_BYTES = 32


def key_path(state_dir: Path) -> Path:
    return state_dir / KEY_FILE


def ensure_key(state_dir: Path) -> tuple[PaymentSigningKey, bool]:
    """The provider key, made now if there is none; True when it was made. An existing key is
    never replaced: it may back a bond and unsettled receipts."""
    path = key_path(state_dir)
    if path.exists():
        return load_key(state_dir), False
    state_dir.mkdir(parents=True, exist_ok=True)
    key = PaymentSigningKey.generate()
    # O_EXCL: two inits racing cannot both write; 0600: nobody else reads a signing key
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as file:
        file.write(key.to_json() + "\n")
    return key, True


def load_key(state_dir: Path) -> PaymentSigningKey:
    return load_key_file(key_path(state_dir), "run `unchained provider init` first")


def load_key_file(path: Path, missing: str) -> PaymentSigningKey:
    """The payment key in the file at `path` (sealed or plain); KeyFileError, with `missing`
    (what to do) when there is no file."""
    try:
        text = read_key_text(path)  # sealed or plain
    except FileNotFoundError as exc:
        raise KeyFileError(f"no key at {path}: {missing}") from exc
    try:
        key = PaymentSigningKey.from_json(text, validate_type=True)
    except (InvalidKeyTypeException, CBORError, KeyError, ValueError) as exc:
        raise KeyFileError(f"{path} is not a {PaymentSigningKey.KEY_TYPE} key: {exc}") from exc
    if len(key.payload) != SEED_BYTES:
        raise KeyFileError(f"{path} holds {len(key.payload)} bytes, not a {SEED_BYTES}-byte key")
    return key


def payout_address(setting: str | None, key: PaymentSigningKey, network: Network) -> Address:
    """Where the provider is paid on `network`: the `daemon.payout_address` setting, else the
    key's own address; ConfigError when the setting is another network's address."""
    if setting is None:
        return Address(key.to_verification_key().hash(), network=network)
    try:
        return key_address(setting, network)
    except ValueError as exc:
        raise ConfigError(f"daemon.payout_address: {exc}") from exc
