"""Signed requests: a CIP-8 COSE_Sign1 by the party's payment key (what a CIP-30 wallet's
`signData` returns: signature + COSE_Key) over the method, path, body digest, a nonce, a
timestamp and the market's identity. A signature is worthless for another request, another
body, another market, or after its time; the nonce store refuses the same request twice.

Stands in for `offchain/market/signed_request.py` until that module lands.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import secrets
import time

from cose.keys import CoseKey
from cose.keys.keyparam import OKPKpX
from pycardano import PaymentSigningKey
from pycardano.cip import cip8

from offchain.market.errors import Unauthorized

SIGNATURE_HEADER = "X-Unchained-Signature"
KEY_HEADER = "X-Unchained-Key"


@dataclasses.dataclass(frozen=True)
class SignedRequest:
    vkey: bytes
    nonce: str
    timestamp_ms: int
    body_sha256: str


def message(
    method: str, path: str, body_sha256: str, nonce: str, timestamp_ms: int, market: str
) -> str:
    """The text a party signs for one request (canonical JSON, sorted keys)."""
    fields = {
        "body_sha256": body_sha256, "market": market, "method": method.upper(),
        "nonce": nonce, "path": path, "timestamp_ms": timestamp_ms,
    }  # fmt: skip
    return json.dumps(fields, sort_keys=True, separators=(",", ":"))


def sign_headers(
    key: PaymentSigningKey,
    method: str,
    path: str,
    body: bytes,
    market: str,
    timestamp_ms: int | None = None,
    nonce: str | None = None,
) -> dict[str, str]:
    """The headers that sign one request (client side: tests, the provider, the consumer)."""
    text = message(
        method, path, hashlib.sha256(body).hexdigest(), nonce or secrets.token_hex(16),
        time.time_ns() // 1_000_000 if timestamp_ms is None else timestamp_ms, market,
    )  # fmt: skip
    signed = cip8.sign(text, key, attach_cose_key=True)
    assert isinstance(signed, dict)
    return {SIGNATURE_HEADER: signed["signature"], KEY_HEADER: signed["key"]}


def verify_headers(
    headers: dict[str, str], method: str, path: str, market: str, now_ms: int, tolerance_ms: int
) -> SignedRequest:
    """Who signed this request, or Unauthorized saying what is wrong; the body digest is
    returned for the caller to compare (an upload is hashed while it streams)."""
    signature, key = headers.get(SIGNATURE_HEADER.lower()), headers.get(KEY_HEADER.lower())
    if not signature or not key:
        raise Unauthorized(f"sign the request: {SIGNATURE_HEADER} and {KEY_HEADER}", "signature")
    try:
        checked = cip8.verify({"signature": signature, "key": key})
        fields = json.loads(checked["message"])
        vkey = CoseKey.decode(bytes.fromhex(key))[OKPKpX]  # the key it verified with
    except Exception as exc:  # a malformed COSE structure fails in many ways
        raise Unauthorized(
            f"not a COSE_Sign1 signature with its COSE_Key: {exc}", "signature"
        ) from exc
    if not checked["verified"]:
        raise Unauthorized("the signature does not verify with its key", "signature")
    expected = {"method": method.upper(), "path": path, "market": market}
    for name, value in expected.items():
        if fields.get(name) != value:
            raise Unauthorized(f"signed for another {name}: {fields.get(name)!r}", name)
    stamp, nonce = fields.get("timestamp_ms"), fields.get("nonce")
    if not isinstance(stamp, int) or abs(now_ms - stamp) > tolerance_ms:
        raise Unauthorized(f"stale or missing timestamp (now {now_ms} ms)", "timestamp_ms")
    if not isinstance(nonce, str) or not 8 <= len(nonce) <= 128:
        raise Unauthorized("the nonce must be a string of 8 to 128 characters", "nonce")
    return SignedRequest(vkey, nonce, stamp, str(fields.get("body_sha256")))
