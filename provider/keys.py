"""The provider's signing key: one ed25519 key in the state directory, as a cardano-cli `.skey`
envelope (PaymentSigningKeyShelley_ed25519), so the operator can inspect or move it with the
usual Cardano tools, or that envelope sealed with a passphrase (`unchained key seal`,
`offchain.core.sealed_keys`). It signs acceptances, receipts and the bond's transactions.
"""

from __future__ import annotations

import os
from pathlib import Path

from cbor2 import CBORError
from pycardano import PaymentSigningKey
from pycardano.exception import InvalidKeyTypeException

from offchain.core.sealed_keys import KeyFileError, read_key_text

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
    path = key_path(state_dir)
    try:
        text = read_key_text(path)  # sealed or plain
    except FileNotFoundError as exc:
        raise KeyFileError(
            f"no provider key at {path}: run `unchained provider init` first"
        ) from exc
    try:
        key = PaymentSigningKey.from_json(text, validate_type=True)
    except (InvalidKeyTypeException, CBORError, KeyError, ValueError) as exc:
        raise KeyFileError(f"{path} is not a {PaymentSigningKey.KEY_TYPE} key: {exc}") from exc
    if len(key.payload) != SEED_BYTES:
        raise KeyFileError(f"{path} holds {len(key.payload)} bytes, not a {SEED_BYTES}-byte key")
    return key
