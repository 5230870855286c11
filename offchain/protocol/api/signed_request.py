"""Signed requests to an Unchained market: a CIP-8 `COSE_Sign1` by the party's payment key,
exactly as a CIP-30 wallet's `signData(addr, payload)` returns it (`{signature, key}`, both hex).
The provider daemon and the consumer SDK sign with it, the market verifies with it: it lives
in the protocol library because apps never import each other.

The payload is canonical JSON under a domain tag naming everything the signature authorizes:
the method, the path with its query exactly as sent (percent-encoded: the bytes on the wire,
so client and server never disagree over an encoding), the sha256 of the body, a nonce, the
time (POSIX ms) and the market's identity. So a signature is worthless for another request,
body or market, outside the tolerance window, or a second time (the nonce store). JSON,
because a wallet shows the payload to its user before signing it.

Server side: `RequestVerifier.verify`. Client side: `RequestFields.of(...)`, then either
`sign_request(key, fields, network=...)` with a pycardano key (a `RequestSigner`, as
`offchain.protocol.api.market_link` takes one), or `fields.payload()` handed to a wallet's
`signData` and `headers_of(its result)`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import secrets
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from offchain.core.errors import UnchainedError

if TYPE_CHECKING:  # imported where a signature is made or opened: RequestFields needs neither
    from pycardano import Address, ExtendedSigningKey, Network, PaymentVerificationKey, SigningKey

DOMAIN = "unchained/request/v1"
SIGNATURE_HEADER = "X-Unchained-Signature"  # the COSE_Sign1, hex
KEY_HEADER = "X-Unchained-Key"  # the COSE_Key, hex
COSE_SIGN1_TAG = "d2"  # CBOR tag 18; wallets send the untagged array, pycardano adds the tag
# A key's hash as an address carries it (the signer's id), blake2b-224; a script's is as long.
KEY_HASH_BYTES = 28

# Each signed field's form; a payload that strays is refused before anything else is compared.
FORMATS = {
    "method": re.compile(r"[A-Z]{3,16}"),
    "path": re.compile(r"/[\x21-\x7e]{0,4095}"),
    "body_sha256": re.compile(r"[0-9a-f]{64}"),
    "nonce": re.compile(r"[A-Za-z0-9_-]{16,128}"),
    "market": re.compile(r"[\x20-\x7e]{1,256}"),
}
MAX_TIMESTAMP_MS = 2**63 - 1  # PostgreSQL's BIGINT


class SignedRequestError(UnchainedError):
    """A signed request refused; `field` names what to fix (a header or a signed field). The
    market answers 401 for each kind but a replay (409); a client says what to fix."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.message, self.field = message, field


class BadSignature(SignedRequestError):
    """No signature, a malformed one, or one that does not verify with its COSE_Key."""


class KeyMismatch(SignedRequestError):
    """The COSE_Key is not the payment key of the address the signature names."""


class BadPayload(SignedRequestError):
    """A valid signature over something that is not a request to an Unchained market."""


class WrongRequest(SignedRequestError):
    """Signed for another method, path, body or market than the one it came with."""


class StaleRequest(SignedRequestError):
    """Signed too long ago, or in the future, for the market's tolerance."""


class ReplayedRequest(SignedRequestError):
    """The signer used this nonce before: the same request a second time."""


def body_digest(body: bytes) -> str:
    """The body's sha256 as a request signs it (lower-case hex)."""
    return hashlib.sha256(body).hexdigest()


@dataclasses.dataclass(frozen=True)
class RequestFields:
    """What one request's signature covers; built valid or not at all."""

    method: str
    path: str
    body_sha256: str
    nonce: str
    timestamp_ms: int
    market: str

    def __post_init__(self) -> None:
        for name, form in FORMATS.items():
            value = getattr(self, name)
            if not isinstance(value, str) or not form.fullmatch(value):
                raise BadPayload(f"signed {name} {value!r} is not of the form {form.pattern}", name)
        stamp = self.timestamp_ms
        if type(stamp) is not int or not 0 <= stamp <= MAX_TIMESTAMP_MS:
            raise BadPayload(f"signed timestamp_ms {stamp!r} is not POSIX ms", "timestamp_ms")

    @classmethod
    def of(
        cls,
        method: str,
        path: str,
        body: bytes,
        market: str,
        *,
        nonce: str | None = None,
        timestamp_ms: int | None = None,
    ) -> RequestFields:
        """The fields for a request about to be sent: a fresh nonce, now on the local clock."""
        return cls(
            method=method.upper(),
            path=path,
            body_sha256=body_digest(body),
            nonce=nonce or secrets.token_urlsafe(24),
            timestamp_ms=time.time_ns() // 1_000_000 if timestamp_ms is None else timestamp_ms,
            market=market,
        )

    def payload(self) -> str:
        """The text to sign: canonical JSON (sorted keys, no spaces) with the domain tag."""
        fields = {"domain": DOMAIN, **dataclasses.asdict(self)}
        return json.dumps(fields, sort_keys=True, separators=(",", ":"))

    @classmethod
    def parse(cls, payload: str) -> RequestFields:
        """The fields of a signed payload: exactly ours, each key once, or BadPayload."""
        try:
            fields = json.loads(payload, object_pairs_hook=_unique_keys)
        except ValueError as exc:
            raise BadPayload(f"the signed payload is not a request: {exc}", "payload") from exc
        if not isinstance(fields, dict) or fields.pop("domain", None) != DOMAIN:
            raise BadPayload(f"the signed payload is not tagged {DOMAIN!r}", "payload")
        expected = {field.name for field in dataclasses.fields(cls)}
        if set(fields) != expected:
            raise BadPayload(f"the signed payload must hold exactly {sorted(expected)}", "payload")
        return cls(**fields)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys appear once: a duplicate could read two ways."""
    keys = [key for key, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError(f"a key appears twice in {keys}")
    return dict(pairs)


@dataclasses.dataclass(frozen=True)
class SignedRequest:
    """A request whose signature verified: who signed it (key, address) and what it says."""

    vkey: PaymentVerificationKey
    address: Address
    fields: RequestFields

    @property
    def key_hash(self) -> str:
        """The signer's id: the blake2b-224 of its payment key, as its address carries it."""
        return self.vkey.hash().payload.hex()

    def check_body(self, body_sha256: str) -> None:
        """For a body hashed after `verify` (an upload, hashed as it streams): WrongRequest
        unless it is the body that was signed."""
        if body_sha256 != self.fields.body_sha256:
            raise WrongRequest(
                f"signed for body_sha256 {self.fields.body_sha256!r}, sent with {body_sha256!r}",
                "body_sha256",
            )


def headers_of(signed: Mapping[str, str]) -> dict[str, str]:
    """The request headers for a CIP-30 `signData` result (`{signature, key}`)."""
    return {SIGNATURE_HEADER: signed["signature"], KEY_HEADER: signed["key"]}


def sign_request(
    key: SigningKey | ExtendedSigningKey, fields: RequestFields, *, network: Network
) -> dict[str, str]:
    """The headers that sign one request with a payment key (the provider, the consumer SDK,
    tests); `network` is the one of the address the signature names."""
    from pycardano.cip import cip8

    signed = cip8.sign(fields.payload(), key, attach_cose_key=True, network=network)
    assert isinstance(signed, dict)  # attach_cose_key=True returns {signature, key}
    return headers_of(signed)


class RequestSigner(Protocol):
    """What signs a client's requests: a party's key, in whatever form it holds it."""

    def sign_request(self, fields: RequestFields) -> dict[str, str]: ...


@dataclasses.dataclass(frozen=True)
class KeySigner:
    """A pycardano payment key signing requests for its address on `network` (the provider)."""

    key: SigningKey | ExtendedSigningKey
    network: Network

    def sign_request(self, fields: RequestFields) -> dict[str, str]:
        return sign_request(self.key, fields, network=self.network)


def open_signed(signature: str, key: str) -> tuple[PaymentVerificationKey, Address, str]:
    """What a `signData` result proves: this payment key signed this payload for the address
    in the signature's protected header. The payload is not read here."""
    from cose.keys import CoseKey
    from cose.keys.keyparam import OKPKpX
    from pycardano import PaymentVerificationKey
    from pycardano.cip import cip8

    try:
        cose_key = CoseKey.decode(bytes.fromhex(key))
        untagged = signature.removeprefix(COSE_SIGN1_TAG)
        checked = cip8.verify({"signature": untagged, "key": key})
        vkey = PaymentVerificationKey(cose_key[OKPKpX])
    except Exception as exc:  # a malformed COSE structure fails in many ways
        raise BadSignature(f"not a COSE_Sign1 with its COSE_Key: {exc!r}", "signature") from exc
    if len(vkey.payload) != 32:
        raise BadSignature("the COSE_Key must hold a 32-byte Ed25519 public key", "key")
    address: Address = checked["signing_address"]
    if address.payment_part != vkey.hash():
        raise KeyMismatch(
            f"the COSE_Key is not the payment key of {address} (sign with that address's "
            "payment key, not a stake or script credential)",
            "key",
        )
    if not checked["verified"]:
        raise BadSignature("the signature does not verify with its COSE_Key", "signature")
    return vkey, address, checked["message"]


class NonceStore(Protocol):
    """Where spent nonces are remembered, per signer, across every process of the market."""

    def claim(self, signer: str, nonce: str, *, keep_until_ms: int, now_ms: int) -> bool:
        """Spend the nonce: False when the signer spent it before (a replay). A store may
        forget a nonce once `now_ms` passes its `keep_until_ms`: its request is stale by then."""
        ...


@dataclasses.dataclass(frozen=True)
class RequestVerifier:
    """The market's side: `market` is its identity, signed into every request to it."""

    market: str
    nonces: NonceStore
    tolerance_ms: int = 5 * 60_000

    def verify(
        self,
        headers: Mapping[str, str],
        method: str,
        path: str,
        body_sha256: str | None,
        now_ms: int,
    ) -> SignedRequest:
        """The signer of this request, or the SignedRequestError that says what is wrong.
        `path` is the raw path and query as sent (`/offers?q=gpus%3E%3D2`); `body_sha256` is
        `body_digest(body)`, or None for an upload the caller hashes as it streams and then
        checks with `SignedRequest.check_body` (its nonce is spent before). The nonce is
        spent only when everything else holds."""
        lower = {name.lower(): value for name, value in headers.items()}
        signature, key = lower.get(SIGNATURE_HEADER.lower()), lower.get(KEY_HEADER.lower())
        if not signature or not key:
            missing = f"sign the request: send {SIGNATURE_HEADER} and {KEY_HEADER}"
            raise BadSignature(missing, "signature")
        vkey, address, payload = open_signed(signature, key)
        signed = SignedRequest(vkey, address, RequestFields.parse(payload))
        fields = signed.fields
        expected = {"market": self.market, "method": method.upper(), "path": path}
        if body_sha256 is not None:
            expected["body_sha256"] = body_sha256
        for name, value in expected.items():
            if getattr(fields, name) != value:
                raise WrongRequest(
                    f"signed for {name} {getattr(fields, name)!r}, sent with {value!r}", name
                )
        skew_ms = fields.timestamp_ms - now_ms
        if abs(skew_ms) > self.tolerance_ms:
            when = "in the future" if skew_ms > 0 else "ago"
            raise StaleRequest(
                f"signed {abs(skew_ms)} ms {when}; the market accepts {self.tolerance_ms} ms "
                "either way (check your clock, sign again)",
                "timestamp_ms",
            )
        keep_until_ms = fields.timestamp_ms + self.tolerance_ms
        if not self.nonces.claim(
            signed.key_hash, fields.nonce, keep_until_ms=keep_until_ms, now_ms=now_ms
        ):
            raise ReplayedRequest("this nonce was used before: a replayed request", "nonce")
        return signed
