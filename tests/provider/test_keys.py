"""The provider key: made once by `init` as a cardano-cli envelope only its owner can read,
kept forever after, and refused with a clear message when missing or not a signing key."""

from __future__ import annotations

import json
import stat

import pytest
from pycardano import Network, PaymentSigningKey
from typer.testing import CliRunner

from offchain.protocol.tx.txbuild import Wallet
from provider.keys import KEY_FILE, KeyFileError, ensure_key, load_key
from unchained.cli import app

cli = CliRunner()


def init(tmp_path, *extra):
    args = ["provider", "init", "--config", tmp_path / "provider.toml",
            "--state-dir", tmp_path / "state", *extra]  # fmt: skip
    result = cli.invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result.stdout


def test_init_makes_a_signing_key_and_prints_its_address_and_vkey(tmp_path):
    out = init(tmp_path)
    path = tmp_path / "state" / KEY_FILE
    envelope = json.loads(path.read_text())
    assert envelope["type"] == "PaymentSigningKeyShelley_ed25519"  # as cardano-cli writes it
    assert envelope["cborHex"].startswith("5820")  # CBOR bytes(32)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    key = PaymentSigningKey.load(str(path))
    vkey = key.to_verification_key().payload
    assert f"made the provider key {path}" in out
    assert f"provider vkey: {vkey.hex()}" in out and len(vkey) == 32
    devnet = Wallet.of(key, Network.TESTNET).address
    assert f"provider address (devnet (magic 42)): {devnet}" in out


def test_init_prints_the_address_of_the_network_it_is_told(tmp_path):
    """A mainnet operator gets a mainnet address (addr1...), not the test networks' one."""
    out = init(tmp_path, "--network", "mainnet")
    key = PaymentSigningKey.load(str(tmp_path / "state" / KEY_FILE))
    mainnet = Wallet.of(key, Network.MAINNET).address
    assert str(mainnet).startswith("addr1")
    assert f"provider address (mainnet (magic 764824073)): {mainnet}" in out
    out = init(tmp_path, "--force", "--network", "preprod")
    assert f"provider address (preprod (magic 1)): {Wallet.of(key, Network.TESTNET).address}" in out


def test_init_refuses_a_network_it_does_not_know_before_writing_anything(tmp_path):
    args = ["provider", "init", "--config", str(tmp_path / "provider.toml"),
            "--state-dir", str(tmp_path / "state"), "--network", "testnet"]  # fmt: skip
    result = cli.invoke(app, args)
    assert result.exit_code == 2
    assert "network 'testnet' is not one of: mainnet, preprod, preview, devnet" in result.stderr
    assert "testnet names no single network" in result.stderr
    assert not (tmp_path / "provider.toml").exists() and not (tmp_path / "state").exists()


def test_init_force_rewrites_the_config_but_never_the_key(tmp_path):
    init(tmp_path)
    before = (tmp_path / "state" / KEY_FILE).read_bytes()
    out = init(tmp_path, "--force", "--cpu-cores", 1)
    assert (tmp_path / "state" / KEY_FILE).read_bytes() == before
    assert "kept the provider key" in out
    assert ensure_key(tmp_path / "state") == (load_key(tmp_path / "state"), False)


def test_a_missing_or_foreign_key_file_is_refused_saying_what_to_do(tmp_path):
    with pytest.raises(KeyFileError, match="run `unchained provider init` first"):
        load_key(tmp_path)
    path = tmp_path / KEY_FILE
    path.write_text(PaymentSigningKey.generate().to_verification_key().to_json())
    with pytest.raises(KeyFileError, match="is not a PaymentSigningKeyShelley_ed25519 key"):
        load_key(tmp_path)
    path.write_text(json.dumps({"type": PaymentSigningKey.KEY_TYPE, "description": "",
                                "cborHex": "4101"}))  # fmt: skip
    with pytest.raises(KeyFileError, match="holds 1 bytes, not a 32-byte key"):
        load_key(tmp_path)
    with pytest.raises(KeyFileError):  # and ensure_key does not paper over it with a new key
        ensure_key(tmp_path)
