"""The consumer's market requests signed without pycardano, which takes seconds to import: a
command that only asks the market (`job list`, `offers search`) signs with PyNaCl and cbor2
when --key is a plain cardano-cli payment key (what `unchained wallet new` writes). The
COSE_Sign1 and COSE_Key are byte for byte what pycardano's `cip8.sign` makes of the same key,
and its address (`wallet address`, `wallet balance`) the text pycardano's `Address` prints
(tests/consumer/test_request_key.py checks them, and the market's verifier); a mnemonic or an
extended key is read by `consumer.sdk.keys`, through pycardano."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import cbor2
from nacl.signing import SigningKey

from consumer.sdk.errors import WalletError
from offchain.core.sealed_keys import KeyFileError, read_key_text
from offchain.protocol.api.signed_request import KEY_HASH_BYTES, RequestFields, headers_of

PLAIN_KEY_TYPE = "PaymentSigningKeyShelley_ed25519"
SEED_CBOR = bytes.fromhex("5820")  # a CBOR byte string of 32 bytes: the Ed25519 seed
ENTERPRISE_ADDRESS = 0b0110_0000  # address header: a payment key, no stake part; | network id
EDDSA, OKP, ED25519 = -8, 1, 6  # COSE algorithm, key type and curve
COSE_KEY = {"kty": 1, "alg": 3, "crv": -1, "x": -2}  # COSE_Key labels
BECH32_CHARSET = "qpzry9x8gf2tvdw0s3jn54khce6mua7l"  # BIP-173
BECH32_GENERATOR = (0x3B6A57B2, 0x26508E6D, 0x1EA119FA, 0x3D4233DD, 0x2A1462B3)


@dataclasses.dataclass(frozen=True)
class RequestKey:
    """A plain payment key and the network its enterprise address is on, signing requests."""

    key: SigningKey
    network_id: int

    @property
    def address_bytes(self) -> bytes:
        """Its enterprise address: the header, then the hash of its verification key."""
        key_hash = hashlib.blake2b(self.vkey, digest_size=KEY_HASH_BYTES).digest()
        return bytes([ENTERPRISE_ADDRESS | self.network_id]) + key_hash

    @property
    def vkey(self) -> bytes:
        """The 32-byte Ed25519 verification key."""
        return bytes(self.key.verify_key)

    @property
    def payload_signer(self) -> RequestKey:
        """What signs its IOUs (`offchain.protocol.ledger.payloads`): itself, as `sign`."""
        return self

    def sign(self, data: bytes) -> bytes:
        """The Ed25519 signature over `data`, as pycardano's `PaymentSigningKey.sign` makes."""
        return self.key.sign(data).signature

    @property
    def address(self) -> str:
        """Its enterprise address in bech32 (CIP-19), as `ConsumerKey.address` prints."""
        return bech32("addr" if self.network_id == 1 else "addr_test", self.address_bytes)

    def sign_request(self, fields: RequestFields) -> dict[str, str]:
        """The CIP-8 headers for one request, as `ConsumerKey.sign_request` makes them."""
        vkey = self.vkey
        protected = cbor2.dumps({1: EDDSA, "address": self.address_bytes})  # label 1: algorithm
        payload = fields.payload().encode()
        signature = self.key.sign(cbor2.dumps(["Signature1", protected, b"", payload])).signature
        sign1 = cbor2.dumps([protected, {"hashed": False}, payload, signature])
        cose_key = cbor2.dumps({COSE_KEY["kty"]: OKP, COSE_KEY["alg"]: EDDSA,
                                COSE_KEY["crv"]: ED25519, COSE_KEY["x"]: vkey})  # fmt: skip
        return headers_of({"signature": sign1.hex(), "key": cose_key.hex()})


def key_text(path: Path) -> str:
    """What the key file holds (unsealed: `offchain.core.sealed_keys`); WalletError saying what
    to do when there is none or it cannot be unsealed."""
    try:
        return read_key_text(path)
    except KeyFileError as exc:
        raise WalletError(str(exc), path=str(path)) from exc
    except FileNotFoundError as exc:
        raise WalletError(
            f"no key at {path}: run `unchained wallet new` (or pass --key FILE)", path=str(path)
        ) from exc
    except UnicodeDecodeError as exc:
        raise WalletError(
            f"{path} is not a key file: not text (byte {exc.start}: {exc.reason})", path=str(path)
        ) from exc


def plain_request_key(path: Path, network_id: int) -> RequestKey | None:
    """The key in `path` when it is a plain payment key envelope; None for anything else."""
    text = key_text(path)
    try:
        envelope = json.loads(text)
        seed = bytes.fromhex(envelope["cborHex"])
    except (ValueError, KeyError, TypeError):
        return None
    if envelope.get("type") != PLAIN_KEY_TYPE or seed[:2] != SEED_CBOR or len(seed) != 34:
        return None
    return RequestKey(SigningKey(seed[2:]), network_id)


def bech32(hrp: str, data: bytes) -> str:
    """`data` in bech32 (BIP-173) with the human-readable part `hrp`, without BIP-173's
    90-character limit (CIP-19 addresses have none)."""
    bits = 8 * len(data)
    pad = -bits % 5
    value, count = int.from_bytes(data, "big") << pad, (bits + pad) // 5
    words = [value >> 5 * (count - 1 - i) & 31 for i in range(count)]
    expanded = [ord(c) >> 5 for c in hrp] + [0] + [ord(c) & 31 for c in hrp]
    check = _polymod([*expanded, *words, 0, 0, 0, 0, 0, 0]) ^ 1
    words += [check >> 5 * (5 - i) & 31 for i in range(6)]
    return hrp + "1" + "".join(BECH32_CHARSET[word] for word in words)


def _polymod(values: list[int]) -> int:
    """BIP-173's checksum polynomial."""
    check = 1
    for value in values:
        top = check >> 25
        check = (check & 0x1FFFFFF) << 5 ^ value
        for i, generator in enumerate(BECH32_GENERATOR):
            if top >> i & 1:
                check ^= generator
    return check
