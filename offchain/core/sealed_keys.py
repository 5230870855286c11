"""Key files sealed with a passphrase, and how every process reads a key file.

A sealed file is a JSON envelope (type `UnchainedSealedKey`) around what the plain file held (a
cardano-cli `.skey` envelope or a mnemonic): libsodium's secretbox (XSalsa20-Poly1305) under a
key derived from the passphrase by Argon2id, with the salt and the cost in the envelope
(PyNaCl: libsodium, audited and kept; the construction is its documented password-based
encryption). A wrong passphrase and a tampered file fail the same authentication.

The passphrase comes from `UNCHAINED_KEY_PASSPHRASE`, else the file `UNCHAINED_KEY_PASSPHRASE_FILE`
names (a service's credential), else a prompt on a terminal. A file is unlocked once per process
(its text kept in memory until the file changes): a daemon signs for days, a CLI command
several times, and each Argon2id derivation costs a quarter of a GiB and most of a second.
Plain files stay readable; `plain_key_warning` says so where a long-running process starts.

Only PyNaCl is imported here: a renter's command that only signs requests stays fast."""

from __future__ import annotations

import getpass
import json
import logging
import os
import sys
from pathlib import Path
from typing import Literal

import nacl.exceptions
import nacl.pwhash
import nacl.secret
import nacl.utils

from offchain.core.errors import UnchainedError

SEALED_TYPE = "UnchainedSealedKey"
PASSPHRASE_VARIABLE = "UNCHAINED_KEY_PASSPHRASE"
PASSPHRASE_FILE_VARIABLE = "UNCHAINED_KEY_PASSPHRASE_FILE"
KDF = "argon2id13"
Strength = Literal["interactive", "moderate", "sensitive"]
# libsodium's named costs (operations, bytes of memory)
COSTS: dict[str, tuple[int, int]] = {
    "interactive": (nacl.pwhash.argon2id.OPSLIMIT_INTERACTIVE,
                    nacl.pwhash.argon2id.MEMLIMIT_INTERACTIVE),
    "moderate": (nacl.pwhash.argon2id.OPSLIMIT_MODERATE, nacl.pwhash.argon2id.MEMLIMIT_MODERATE),
    "sensitive": (nacl.pwhash.argon2id.OPSLIMIT_SENSITIVE,
                  nacl.pwhash.argon2id.MEMLIMIT_SENSITIVE),
}  # fmt: skip
# no envelope may make this process spend more than libsodium's "sensitive" cost
MAX_OPS, MAX_MEMORY = COSTS["sensitive"]
log = logging.getLogger("unchained.keys")
_unlocked: dict[tuple[Path, int, int], str] = {}  # (file, mtime ns, size) -> its plain text


class KeyFileError(UnchainedError, ValueError):
    """A key file cannot be read or unlocked; the message names the file and what to do."""


def is_sealed(text: str) -> bool:
    try:
        return json.loads(text).get("type") == SEALED_TYPE
    except (ValueError, AttributeError):
        return False


def seal(plain: str, passphrase: str, strength: Strength = "moderate") -> str:
    """The sealed envelope (JSON text) of a key file's `plain` text."""
    if not passphrase:
        raise KeyFileError("an empty passphrase seals nothing")
    ops, memory = COSTS[strength]
    salt = nacl.utils.random(nacl.pwhash.argon2id.SALTBYTES)
    box = nacl.secret.SecretBox(_derive(passphrase, salt, ops, memory))
    envelope = {
        "type": SEALED_TYPE,
        "description": "a key file sealed by `unchained key seal`: Argon2id + XSalsa20-Poly1305",
        "kdf": KDF, "opslimit": ops, "memlimit": memory, "salt": salt.hex(),
        "box": box.encrypt(plain.encode()).hex(),
    }  # fmt: skip
    return json.dumps(envelope, indent=2) + "\n"


def unseal(text: str, passphrase: str, path: Path) -> str:
    """The plain text of the sealed envelope `text` (read from `path`, named in errors)."""
    try:
        envelope = json.loads(text)
        ops, memory = int(envelope["opslimit"]), int(envelope["memlimit"])
        salt, sealed = bytes.fromhex(envelope["salt"]), bytes.fromhex(envelope["box"])
        kdf = envelope["kdf"]
    except (ValueError, KeyError, TypeError) as exc:
        raise KeyFileError(f"{path}: not a readable sealed key ({exc})") from exc
    if kdf != KDF or len(salt) != nacl.pwhash.argon2id.SALTBYTES:
        raise KeyFileError(f"{path}: sealed with {kdf!r}, not {KDF} with a 16-byte salt")
    if not (0 < ops <= MAX_OPS and 0 < memory <= MAX_MEMORY):
        raise KeyFileError(f"{path}: its Argon2id cost ({ops} passes, {memory} bytes) is past "
                           "libsodium's 'sensitive' one: refused")  # fmt: skip
    try:
        plain = nacl.secret.SecretBox(_derive(passphrase, salt, ops, memory)).decrypt(sealed)
    except nacl.exceptions.CryptoError as exc:
        raise KeyFileError(f"{path}: wrong passphrase, or the file was altered") from exc
    return plain.decode()


def _derive(passphrase: str, salt: bytes, ops: int, memory: int) -> bytes:
    return nacl.pwhash.argon2id.kdf(
        nacl.secret.SecretBox.KEY_SIZE, passphrase.encode(), salt, opslimit=ops, memlimit=memory
    )


def passphrase_for(path: Path) -> str:
    """The passphrase for `path`: the variable, the file it names, or a prompt on a terminal."""
    given = os.environ.get(PASSPHRASE_VARIABLE)
    if given:
        return given
    named = os.environ.get(PASSPHRASE_FILE_VARIABLE)
    if named:
        try:
            return Path(named).read_text().rstrip("\n")
        except OSError as exc:
            raise KeyFileError(f"{PASSPHRASE_FILE_VARIABLE}={named}: {exc.strerror}") from exc
    if sys.stdin.isatty():
        return getpass.getpass(f"passphrase for {path}: ")
    raise KeyFileError(f"{path} is sealed: set {PASSPHRASE_VARIABLE} or "
                       f"{PASSPHRASE_FILE_VARIABLE}, or run on a terminal to be asked")  # fmt: skip


def read_key_text(path: Path) -> str:
    """What the key file at `path` holds, unsealed if it is sealed (once per process).
    FileNotFoundError and UnicodeDecodeError go to the caller, who knows what to advise."""
    text = path.read_text()
    if not is_sealed(text):
        return text
    stat = path.stat()
    unlocked = (path.resolve(), stat.st_mtime_ns, stat.st_size)
    if unlocked not in _unlocked:
        _unlocked[unlocked] = unseal(text, passphrase_for(path), path)
    return _unlocked[unlocked]


def plain_key_warning(path: Path) -> None:
    """Log a warning when the key file at `path` is not sealed (a service's start)."""
    try:
        sealed = is_sealed(path.read_text())
    except (OSError, UnicodeDecodeError):
        return  # its loader says what is wrong
    if not sealed:
        log.warning("key file %s is not sealed: anyone who reads it can spend with it; "
                    "`unchained key seal` protects it with a passphrase", path)  # fmt: skip
