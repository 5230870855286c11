"""Key files sealed with a passphrase (`offchain.core.sealed_keys`, `unchained key`): the sealed
file is unlocked with the passphrase from the environment or a file, once per process; a wrong
passphrase, a tampered file, a missing passphrase and an envelope asking for an absurd cost are
each refused with a message; a plain file is still read, with a warning where a service starts.
Through the real CLI: a renter's sealed key gives the same address as the plain one."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from consumer.sdk.keys import new_wallet
from offchain.core import sealed_keys
from offchain.core.sealed_keys import (
    PASSPHRASE_FILE_VARIABLE,
    PASSPHRASE_VARIABLE,
    KeyFileError,
    plain_key_warning,
    read_key_text,
    seal,
    unseal,
)
from tests.consumer.cli import run

PASSPHRASE = "correct horse battery staple"


def sealed_copy(tmp_path: Path, passphrase: str = PASSPHRASE) -> tuple[Path, str]:
    """A fresh plain key's text, and a file holding it sealed (libsodium's cheapest cost)."""
    plain_path = tmp_path / "plain.skey"
    new_wallet(plain_path, mnemonic=False)
    plain = plain_path.read_text()
    path = tmp_path / "sealed.skey"
    path.write_text(seal(plain, passphrase, "interactive"))
    return path, plain


def test_a_sealed_key_opens_with_its_passphrase_and_no_other(tmp_path):
    path, plain = sealed_copy(tmp_path)
    text = path.read_text()
    assert plain not in text and json.loads(text)["type"] == "UnchainedSealedKey"
    assert unseal(text, PASSPHRASE, path) == plain
    with pytest.raises(KeyFileError, match="wrong passphrase, or the file was altered"):
        unseal(text, "incorrect horse", path)
    envelope = json.loads(text)
    box = bytearray.fromhex(envelope["box"])
    box[-1] ^= 1
    with pytest.raises(KeyFileError, match="wrong passphrase, or the file was altered"):
        unseal(json.dumps({**envelope, "box": box.hex()}), PASSPHRASE, path)
    # an envelope may not make the reader spend more than libsodium's "sensitive" cost
    costly = json.dumps({**envelope, "memlimit": sealed_keys.MAX_MEMORY * 4})
    with pytest.raises(KeyFileError, match="past libsodium's 'sensitive' one"):
        unseal(costly, PASSPHRASE, path)
    with pytest.raises(KeyFileError, match="an empty passphrase"):
        seal(plain, "")


def test_a_sealed_file_is_unlocked_once_per_process(tmp_path, monkeypatch):
    path, plain = sealed_copy(tmp_path)
    secret = tmp_path / "passphrase"
    secret.write_text(PASSPHRASE + "\n")
    monkeypatch.delenv(PASSPHRASE_VARIABLE, raising=False)
    monkeypatch.setenv(PASSPHRASE_FILE_VARIABLE, str(secret))
    assert read_key_text(path) == plain
    secret.write_text("not it")  # unlocked already: not asked again
    assert read_key_text(path) == plain
    path.write_text(seal(plain, "another one", "interactive"))  # a new file: asked again
    with pytest.raises(KeyFileError, match="wrong passphrase"):
        read_key_text(path)
    monkeypatch.delenv(PASSPHRASE_FILE_VARIABLE)
    with pytest.raises(KeyFileError, match=f"set {PASSPHRASE_VARIABLE} or"):
        read_key_text(path)  # no passphrase, no terminal


def test_a_plain_key_is_read_with_a_warning_where_a_service_starts(tmp_path, caplog):
    path, plain = sealed_copy(tmp_path)
    caplog.set_level(logging.WARNING, "unchained.keys")
    plain_key_warning(path)
    assert not caplog.records
    assert read_key_text(tmp_path / "plain.skey") == plain
    plain_key_warning(tmp_path / "plain.skey")
    assert "is not sealed" in caplog.text


def test_the_cli_seals_a_renters_key_and_signs_with_it(tmp_path):
    key = tmp_path / "consumer.skey"
    address = str(new_wallet(key, mnemonic=False).address)
    plain = key.read_text()
    env = {**os.environ, "UNCHAINED_CONSUMER_KEY": str(key), PASSPHRASE_VARIABLE: PASSPHRASE}
    env.pop(PASSPHRASE_FILE_VARIABLE, None)
    sealed = run(env, "key", "seal", str(key), "--strength", "interactive", cwd=tmp_path)
    assert sealed.returncode == 0 and "sealed" in sealed.stdout, sealed.stderr
    assert plain not in key.read_text() and oct(key.stat().st_mode & 0o777) == "0o600"
    again = run(env, "key", "seal", str(key), cwd=tmp_path)
    assert again.returncode == 2 and "is sealed already" in again.stderr

    shown = run(env, "wallet", "address", cwd=tmp_path)
    assert shown.returncode == 0 and address in shown.stdout, shown.stderr
    wrong = run({**env, PASSPHRASE_VARIABLE: "guess"}, "wallet", "address", cwd=tmp_path)
    assert wrong.returncode != 0 and "wrong passphrase" in wrong.stdout + wrong.stderr
    assert "Traceback" not in wrong.stderr
    none = {k: v for k, v in env.items() if k != PASSPHRASE_VARIABLE}
    asked = run(none, "wallet", "address", cwd=tmp_path)
    assert asked.returncode != 0 and PASSPHRASE_VARIABLE in asked.stdout + asked.stderr

    opened = run(env, "key", "unseal", str(key), cwd=tmp_path)
    assert opened.returncode == 0 and key.read_text() == plain, opened.stderr
