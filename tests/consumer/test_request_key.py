"""Requests signed without pycardano (`consumer.sdk.request_key`): for a plain payment key the
headers are byte for byte pycardano's CIP-8 signature of the same request (Ed25519 signs
deterministically), on a test network and on mainnet, and the market's verifier names the
key's own address as the signer; the key's address is the text pycardano's `Address` prints
(bech32, `wallet address`), and its IOUs are pycardano's (`endpoint call`). Anything but a
plain key (a mnemonic, an extended key, a file that is no key) is left to `consumer.sdk.keys`;
a missing file says what to do."""

from __future__ import annotations

from pathlib import Path

import pytest
from pycardano import Network, PaymentSigningKey

from consumer.sdk.errors import WalletError
from consumer.sdk.keys import ConsumerKey, from_mnemonic, load_key, new_wallet
from consumer.sdk.request_key import plain_request_key
from offchain.protocol.api.signed_request import RequestFields, RequestVerifier
from offchain.protocol.ledger.iou import SignedIou
from tests.consumer.test_keys import WORDS
from tests.protocol.nonces import MemoryNonceStore

MARKET = "unchained-market:request-key-test"


@pytest.mark.parametrize("network", [Network.TESTNET, Network.MAINNET])
def test_a_plain_key_signs_as_pycardano_does_and_the_market_verifies_it(network, tmp_path):
    made = new_wallet(tmp_path / "consumer.skey", mnemonic=False, network=network)
    light = plain_request_key(tmp_path / "consumer.skey", network.value)
    assert light is not None
    body = b'{"spec": "x"}'
    fields = RequestFields.of("POST", "/jobs?limit=5", body, MARKET)
    headers = light.sign_request(fields)
    assert headers == made.sign_request(fields)

    verifier = RequestVerifier(MARKET, MemoryNonceStore())
    signed = verifier.verify(headers, "POST", "/jobs?limit=5", fields.body_sha256,
                             fields.timestamp_ms)  # fmt: skip
    assert signed.key_hash == made.key_hash and signed.address == made.address


@pytest.mark.parametrize("network", [Network.TESTNET, Network.MAINNET])
def test_a_plain_key_names_the_address_pycardano_does(network, tmp_path):
    for n in range(20):
        made = new_wallet(tmp_path / f"{n}.skey", mnemonic=False, network=network)
        light = plain_request_key(tmp_path / f"{n}.skey", network.value)
        assert light is not None and light.address == str(made.address)


def test_a_plain_key_signs_ious_as_pycardano_does(tmp_path: Path):
    made = new_wallet(tmp_path / "consumer.skey", mnemonic=False)
    light = plain_request_key(tmp_path / "consumer.skey", 0)
    assert light is not None and light.vkey == made.vkey
    for amount in (0, 1, 2_000, 2**64 - 1):
        iou = (0, bytes(range(28)), bytes(range(28, 56)), amount)
        signed = SignedIou.sign(light.payload_signer, *iou)
        assert signed == SignedIou.sign(made.payload_signer, *iou)
        assert signed.signed_by(made.vkey, *iou[:2])


def test_other_keys_are_left_to_pycardano(tmp_path: Path):
    mnemonic = tmp_path / "mnemonic"
    new_wallet(mnemonic, mnemonic=True)
    extended = tmp_path / "extended.skey"
    extended.write_text(from_mnemonic(WORDS).to_json())
    stake = tmp_path / "stake.skey"
    stake.write_text(PaymentSigningKey.generate().to_json().replace("Payment", "Stake"))
    garbage = tmp_path / "garbage.skey"
    garbage.write_text('{"type": "PaymentSigningKeyShelley_ed25519", "cborHex": "5820ab"}')
    for path in (mnemonic, extended, stake, garbage):
        assert plain_request_key(path, 0) is None, path
    assert isinstance(load_key(mnemonic), ConsumerKey)

    with pytest.raises(WalletError, match=r"no key at .*: run `unchained wallet new`"):
        plain_request_key(tmp_path / "missing.skey", 0)
