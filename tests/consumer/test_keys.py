"""The consumer's keys: a BIP-39 mnemonic gives the CIP-1852 payment key every wallet derives
(CIP-19's published vector, and pycardano's HD wallet walked one step at a time), and
`unchained wallet new` writes a key only its owner can read, whose address `wallet address`
gives back."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from pycardano import HDWallet, Network, PaymentExtendedVerificationKey

from consumer.sdk.errors import WalletError
from consumer.sdk.keys import ConsumerKey, from_mnemonic, load_key
from tests.consumer.cli import run, run_json

# CIP-19's test vector: this mnemonic's key at m/1852'/1815'/0'/0/0, as an enterprise address
WORDS = "test walk nut penalty hip pave soap entry language right filter choice"
KEY_HASH = "9493315cd92eb5d8c4304e67b7e16ae36d61d34502694657811a2c8e"
TESTNET_ADDRESS = "addr_test1vz2fxv2umyhttkxyxp8x0dlpdt3k6cwng5pxj3jhsydzerspjrlsz"
MAINNET_ADDRESS = "addr1vx2fxv2umyhttkxyxp8x0dlpdt3k6cwng5pxj3jhsydzers66hrl8"


def stepwise_key_hash(words: str, account: int, index: int) -> str:
    """The payment key hash at m/1852'/1815'/account'/0/index, one derivation at a time."""
    node = HDWallet.from_mnemonic(words)
    for step, hardened in ((1852, True), (1815, True), (account, True), (0, False),
                           (index, False)):  # fmt: skip
        node = node.derive(step, hardened=hardened)
    vkey = PaymentExtendedVerificationKey(node.public_key + node.chain_code)
    return vkey.hash().payload.hex()


def test_a_mnemonic_gives_the_cip1852_payment_key():
    key = from_mnemonic(WORDS)
    assert ConsumerKey(key).key_hash == KEY_HASH == stepwise_key_hash(WORDS, 0, 0)
    assert str(ConsumerKey(key, Network.TESTNET).address) == TESTNET_ADDRESS
    assert str(ConsumerKey(key, Network.MAINNET).address) == MAINNET_ADDRESS
    other = ConsumerKey(from_mnemonic(WORDS, account=1, index=3)).key_hash
    assert other == stepwise_key_hash(WORDS, 1, 3) != KEY_HASH


def test_a_mnemonic_file_is_read_as_written(tmp_path: Path):
    path = tmp_path / "words"
    path.write_text("  " + WORDS.replace(" ", "\n", 3) + "\n\n")  # lines and stray blanks
    assert str(load_key(path).address) == TESTNET_ADDRESS
    path.write_text(WORDS.replace("choice", "abandon"))  # the checksum word changed
    with pytest.raises(WalletError, match="not a BIP-39 mnemonic"):
        load_key(path)


@pytest.mark.slow  # five `unchained` processes, each importing pycardano (about 2 s)
@pytest.mark.parametrize("mnemonic", [True, False], ids=["mnemonic", "skey"])
def test_wallet_new_then_address(tmp_path: Path, mnemonic: bool):
    key = tmp_path / "keys" / "consumer.key"
    env = {**os.environ, "UNCHAINED_CONSUMER_KEY": str(key)}
    code, made = run_json(env, "wallet", "new", *(["--mnemonic"] if mnemonic else []),
                          cwd=tmp_path)  # fmt: skip
    assert code == 0, made
    assert made["key"] == str(key) and made["address"].startswith("addr_test1")
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    written = key.read_text()
    if mnemonic:
        assert len(written.split()) == 24 and HDWallet.is_mnemonic(" ".join(written.split()))
        assert str(ConsumerKey(from_mnemonic(written)).address) == made["address"]
    else:
        assert '"PaymentSigningKeyShelley_ed25519"' in written
    code, shown = run_json(env, "wallet", "address", cwd=tmp_path)
    assert code == 0 and shown == {"address": made["address"]}
    assert run(env, "wallet", "address", cwd=tmp_path).stdout.strip() == made["address"]

    code, error = run_json(env, "wallet", "new", cwd=tmp_path)
    assert code == 1 and error["error"] == "WalletError" and "never replaced" in error["message"]
    assert key.read_text() == written
