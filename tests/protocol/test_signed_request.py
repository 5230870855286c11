"""Signed requests: what a CIP-30 wallet's signData returns verifies, and every tampering, replay
and stale request is refused with its reason. Vectors built by hand (cbor2 + PyNaCl, per CIP-8
and RFC 8152) and one from a real wallet check the wire format without the code under test."""

from __future__ import annotations

import hashlib
import json

import cbor2
import nacl.signing
import pytest
from pycardano import Address, Network, PaymentSigningKey, StakeSigningKey
from pycardano.cip import cip8

from offchain.core.errors import UnchainedError
from offchain.protocol.api.signed_request import (
    KEY_HEADER,
    SIGNATURE_HEADER,
    BadPayload,
    BadSignature,
    KeyMismatch,
    ReplayedRequest,
    RequestFields,
    RequestVerifier,
    SignedRequestError,
    StaleRequest,
    WrongRequest,
    body_digest,
    headers_of,
    open_signed,
    sign_request,
)
from tests.protocol.nonces import MemoryNonceStore

MARKET = "0:unchained-market:test"
NOW_MS = 1_795_000_000_000
TOLERANCE_MS = 60_000
BODY = b'{"spec": "x"}'
KEY = PaymentSigningKey.from_cbor("5820" + "11" * 32)
OTHER = PaymentSigningKey.from_cbor("5820" + "22" * 32)

# A real wallet's signData (Eternl, base testnet address) over a text that is not a request.
WALLET = {
    "signature": "845846a2012767616464726573735839006633e41eab3ae02578d1c2a6d1cc2e4d36b6a34b0a"
    "12e3e7995745313d234915a60cc51671e72aaa296f3b194f458d313d9fa9cfca4bb066a16668617368656"
    "4f4587d546f2070726f636565642c20706c65617365207369676e2074686973206461746120746f207665"
    "7269667920796f7572206964656e746974792e205468697320656e737572657320746861742074686520"
    "616374696f6e2069732073656375726520616e6420636f6e6669726d7320796f7572206964656e746974"
    "792e58405e4bc8590794b7e91abe883af40a567380a5f3127ec2c0ce7aacf972b1a9257f9ec65e3ecc4b"
    "9e41e7070fc883b67cf12665dc101d8024b6b19129b849a80201",
    "key": "a4010103272006215820136679540c10b97f80eebaf2ce53a68013604873de43cc4c4a985e056aee2fe8",
}


def verifier(store: MemoryNonceStore | None = None) -> RequestVerifier:
    return RequestVerifier(MARKET, MemoryNonceStore() if store is None else store, TOLERANCE_MS)


def signed(key=KEY, method="POST", path="/jobs", body=BODY, market=MARKET, **changes) -> dict:
    changes.setdefault("timestamp_ms", NOW_MS)
    fields = RequestFields.of(method, path, body, market, **changes)
    return sign_request(key, fields, network=Network.TESTNET)


def check(headers: dict, method="POST", path="/jobs", body=BODY, now_ms=NOW_MS, store=None):
    return verifier(store).verify(headers, method, path, body_digest(body), now_ms)


def refused(kind: type[SignedRequestError], field: str, headers: dict, **request) -> str:
    with pytest.raises(kind) as refusal:
        check(headers, **request)
    assert refusal.value.field == field, refusal.value
    return str(refusal.value)


def blake2b_224(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=28).digest()


def by_hand(seed: bytes, payload: bytes, address: bytes, tagged: bool = False) -> dict:
    """A signData result built from CIP-8 / RFC 8152 alone: COSE_Sign1 = [protected bstr,
    {hashed: false}, payload, Ed25519 over Sig_structure], COSE_Key = {kty OKP, alg EdDSA,
    crv Ed25519, x}."""
    key = nacl.signing.SigningKey(seed)
    protected = cbor2.dumps({1: -8, "address": address})
    to_sign = cbor2.dumps(["Signature1", protected, b"", payload])
    message = [protected, {"hashed": False}, payload, key.sign(to_sign).signature]
    sign1 = cbor2.dumps(cbor2.CBORTag(18, message) if tagged else message)
    cose_key = cbor2.dumps({1: 1, 3: -8, -1: 6, -2: bytes(key.verify_key)})
    return {"signature": sign1.hex(), "key": cose_key.hex()}


def test_round_trip_names_the_signer_and_the_fields():
    request = check(signed())
    assert request.key_hash == KEY.to_verification_key().hash().payload.hex()
    assert request.address == Address(KEY.to_verification_key().hash(), network=Network.TESTNET)
    assert request.fields == RequestFields("POST", "/jobs", body_digest(BODY),
                                           request.fields.nonce, NOW_MS, MARKET)  # fmt: skip


def test_payload_is_canonical_tagged_json_a_wallet_can_show():
    fields = RequestFields.of("get", "/jobs/1?x=2", b"", MARKET, nonce="n" * 16, timestamp_ms=5)
    assert json.loads(fields.payload()) == {
        "domain": "unchained/request/v1", "method": "GET", "path": "/jobs/1?x=2",
        "body_sha256": hashlib.sha256(b"").hexdigest(), "nonce": "n" * 16,
        "timestamp_ms": 5, "market": MARKET,
    }  # fmt: skip
    assert RequestFields.parse(fields.payload()) == fields
    assert " " not in fields.payload()
    fresh = {RequestFields.of("GET", "/", b"", MARKET).nonce for _ in range(2)}
    assert len(fresh) == 2


@pytest.mark.parametrize(
    ("request_changes", "field"),
    [
        ({"method": "PUT"}, "method"),
        ({"path": "/jobs/other"}, "path"),
        ({"path": "/jobs?limit=1"}, "path"),
        ({"body": BODY + b" "}, "body_sha256"),
    ],
)
def test_a_signature_for_another_request_is_refused(request_changes, field):
    message = refused(WrongRequest, field, signed(), **request_changes)
    assert "signed for" in message


def test_a_signature_for_another_market_is_refused():
    assert "market" in refused(WrongRequest, "market", signed(market="1:unchained-market"))


def test_missing_or_garbled_signatures_are_refused():
    headers = signed()
    refused(BadSignature, "signature", {})
    refused(BadSignature, "signature", {SIGNATURE_HEADER: headers[SIGNATURE_HEADER]})
    refused(BadSignature, "signature", {**headers, SIGNATURE_HEADER: "zz"})
    refused(BadSignature, "signature", {**headers, SIGNATURE_HEADER: "84" + "00" * 10})
    refused(BadSignature, "signature", {**headers, KEY_HEADER: "a0"})


def test_headers_are_found_whatever_their_case():
    lower = {name.lower(): value for name, value in signed().items()}
    assert check(lower).fields.market == MARKET


def test_a_tampered_signature_or_payload_does_not_verify():
    headers = signed()
    sign1 = cbor2.loads(bytes.fromhex(headers[SIGNATURE_HEADER]))
    forged_payload = sign1[2].replace(b'"POST"', b'"PUT"')
    flipped_signature = bytes([sign1[3][0] ^ 1]) + sign1[3][1:]
    for forged in ([*sign1[:2], forged_payload, sign1[3]], [*sign1[:3], flipped_signature]):
        tampered = {**headers, SIGNATURE_HEADER: cbor2.dumps(forged).hex()}
        message = refused(BadSignature, "signature", tampered, method="PUT")
        assert "does not verify" in message


def test_another_key_than_the_signed_address_is_refused():
    other_key = signed(key=OTHER)[KEY_HEADER]
    message = refused(KeyMismatch, "key", {**signed(), KEY_HEADER: other_key})
    assert "payment key" in message
    # a signature whose header names someone else's address, though its own key verifies
    seed = bytes.fromhex("33" * 32)
    others = b"\x60" + OTHER.to_verification_key().hash().payload
    refused(KeyMismatch, "key", headers_of(by_hand(seed, b"{}", others)))


def test_a_stake_key_signature_is_refused():
    stake = StakeSigningKey.from_cbor("5820" + "44" * 32)
    refused(KeyMismatch, "key", signed(key=stake))


GOOD = RequestFields.of("POST", "/jobs", BODY, MARKET, timestamp_ms=NOW_MS).payload()


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ("hello", "payload"),
        ("[]", "payload"),
        ('{"method":"POST"}', "payload"),
        (GOOD.replace("/v1", "/v2"), "payload"),
        (GOOD[:-1] + ',"extra":1}', "payload"),
        (GOOD[:-1] + ',"method":"POST"}', "payload"),
        (GOOD.replace('"/jobs"', '"jobs"'), "path"),
        (GOOD.replace(f":{NOW_MS}", f':"{NOW_MS}"'), "timestamp_ms"),
        (GOOD.replace(f":{NOW_MS}", ":true"), "timestamp_ms"),
        (GOOD.replace('"POST"', '"post"'), "method"),
    ],
)
def test_a_signature_over_something_else_is_refused(payload, field):
    headers = headers_of(cip8.sign(payload, KEY, attach_cose_key=True, network=Network.TESTNET))
    refused(BadPayload, field, headers)


@pytest.mark.parametrize(
    ("skew_ms", "accepted"),
    [(0, True), (TOLERANCE_MS, True), (-TOLERANCE_MS, True),
     (TOLERANCE_MS + 1, False), (-TOLERANCE_MS - 1, False)],
)  # fmt: skip
def test_timestamps_outside_the_tolerance_are_refused(skew_ms, accepted):
    headers = signed(timestamp_ms=NOW_MS + skew_ms)
    if accepted:
        assert check(headers).fields.timestamp_ms == NOW_MS + skew_ms
    else:
        message = refused(StaleRequest, "timestamp_ms", headers)
        assert ("in the future" if skew_ms > 0 else "ago") in message


def test_a_replay_is_refused_and_a_refused_request_spends_no_nonce():
    store = MemoryNonceStore()
    headers = signed(nonce="replay-me-0123456")
    with pytest.raises(WrongRequest):
        check(headers, path="/elsewhere", store=store)
    check(headers, store=store)
    with pytest.raises(ReplayedRequest) as replay:
        check(headers, store=store)
    assert replay.value.field == "nonce"
    other_signer = signed(key=OTHER, nonce="replay-me-0123456")
    assert check(other_signer, store=store).key_hash != KEY.to_verification_key().hash()


def test_the_memory_store_forgets_nonces_once_their_requests_are_stale():
    store = MemoryNonceStore()
    assert store.claim("a", "n1", keep_until_ms=100, now_ms=0)
    assert not store.claim("a", "n1", keep_until_ms=100, now_ms=100)
    assert store.claim("a", "n2", keep_until_ms=300, now_ms=101)
    # n1 is forgotten (a request signed with it is stale by now); n2 is not
    assert store.claim("a", "n1", keep_until_ms=400, now_ms=101)
    assert not store.claim("a", "n2", keep_until_ms=400, now_ms=300)


def test_refusals_share_one_root_and_name_their_field():
    for kind in (BadSignature, KeyMismatch, BadPayload, WrongRequest, StaleRequest,
                 ReplayedRequest):  # fmt: skip
        assert issubclass(kind, SignedRequestError) and issubclass(kind, UnchainedError)
    assert kind("why", "nonce").field == "nonce"


def test_an_upload_is_verified_first_and_its_body_checked_once_hashed():
    store = MemoryNonceStore()
    request = verifier(store).verify(signed(), "POST", "/jobs", None, NOW_MS)
    request.check_body(body_digest(BODY))
    with pytest.raises(WrongRequest) as refusal:
        request.check_body(body_digest(BODY + b" "))
    assert refusal.value.field == "body_sha256"


@pytest.mark.parametrize("tagged", [False, True])
def test_a_hand_built_signature_with_a_base_address_verifies(tagged):
    """What a wallet sends for a base address (payment + stake), built without pycardano."""
    seed = bytes.fromhex("55" * 32)
    public = bytes(nacl.signing.SigningKey(seed).verify_key)
    base = b"\x00" + blake2b_224(public) + blake2b_224(b"stake key")
    fields = RequestFields.of("POST", "/jobs", BODY, MARKET, timestamp_ms=NOW_MS)
    request = check(headers_of(by_hand(seed, fields.payload().encode(), base, tagged)))
    assert request.key_hash == blake2b_224(public).hex()
    assert request.address.to_primitive() == base
    assert request.fields == fields


def test_what_pycardano_signs_is_cip8_read_by_hand():
    headers = signed()
    protected, unprotected, payload, signature = cbor2.loads(
        bytes.fromhex(headers[SIGNATURE_HEADER])
    )
    public = bytes(KEY.to_verification_key().payload)
    assert cbor2.loads(protected) == {1: -8, "address": b"\x60" + blake2b_224(public)}
    assert unprotected == {"hashed": False}
    to_sign = cbor2.dumps(["Signature1", protected, b"", payload])
    nacl.signing.VerifyKey(public).verify(to_sign, signature)  # raises if it does not verify
    assert cbor2.loads(bytes.fromhex(headers[KEY_HEADER]))[-2] == public
    assert json.loads(payload)["market"] == MARKET


def test_a_real_wallets_signdata_opens_but_is_no_request():
    vkey, address, payload = open_signed(WALLET["signature"], WALLET["key"])
    assert vkey.payload.hex() == WALLET["key"][-64:]
    assert str(address).startswith("addr_test1q")  # a base address: payment + stake
    assert payload.startswith("To proceed, please sign this data")
    refused(BadPayload, "payload", headers_of(WALLET))
