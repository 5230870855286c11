"""Control requests (`offchain.protocol.api.control`): signed by the renter key over the domain, the
network id and the request's canonical JSON, so a signature is worthless on another network,
for another request or with another key; the wire form read back exactly; malformed requests
refused with a 400 that names the field; the time window both ways."""

from __future__ import annotations

import pytest
from pycardano import HDWallet, PaymentSigningKey

from consumer.sdk.keys import from_mnemonic
from offchain.protocol.api.control import (
    CONTROL_DOMAIN,
    TOLERANCE_MS,
    ControlRefused,
    ControlRequest,
    SignedControl,
)
from offchain.protocol.job.jobspec import canonical_json

KEY = PaymentSigningKey.generate()
VKEY = KEY.to_verification_key().payload
CHANNEL = bytes(range(28))
SPEC = {"kind": "service", "image": "a/b:1", "port": 80, "price_per_request": 5}


def deploy(**changes: object) -> ControlRequest:
    request = ControlRequest.of("deploy", "svc", CHANNEL, SPEC)
    return request.model_copy(update=changes)


def test_the_signed_bytes_and_their_checks() -> None:
    request = deploy(issued_ms=1_000, nonce="ab" * 16)
    assert request.payload(0) == CONTROL_DOMAIN + b"\x00" + canonical_json(
        {"action": "deploy", "name": "svc", "channel": CHANNEL.hex(), "spec": SPEC,
         "issued_ms": 1_000, "nonce": "ab" * 16})  # fmt: skip
    assert deploy().nonce != deploy().nonce  # each request its own: a gateway takes it once
    signed = SignedControl.sign(KEY, 0, request)
    assert signed.key == VKEY and signed.signed(0) and not signed.signed(1)
    signed.check(0, VKEY, 1_000 + TOLERANCE_MS)
    with pytest.raises(ControlRefused, match="does not verify") as refused:
        signed.check(1, VKEY, 1_000)
    assert refused.value.status == 401
    with pytest.raises(ControlRefused, match="is not the renter key") as refused:
        signed.check(0, b"\x01" * 32, 1_000)
    assert refused.value.status == 403
    for now in (1_000 + TOLERANCE_MS + 1, 1_000 - TOLERANCE_MS - 1):
        with pytest.raises(ControlRefused, match="more than 120 s from the gateway's clock"):
            signed.check(0, VKEY, now)
    other = SignedControl(deploy(issued_ms=1_000, name="other"), signed.key, signed.signature)
    assert not other.signed(0)  # the signature is over this request alone


def test_the_wire_form_reads_back_and_refuses_what_is_malformed() -> None:
    signed = SignedControl.sign(KEY, 0, ControlRequest.of("stop", "svc", CHANNEL))
    wire = signed.to_wire()
    assert "spec" not in wire["request"]  # fields left out are not signed either
    assert SignedControl.from_wire(wire) == signed
    admitted = deploy(channel_utxo="ab" * 32 + "#0", channel_terms="d87980")
    assert (
        SignedControl.from_wire(SignedControl.sign(KEY, 0, admitted).to_wire()).request == admitted
    )
    words = HDWallet.generate_mnemonic()
    extended = SignedControl.sign(from_mnemonic(words), 0, deploy())  # a wallet's key
    assert len(extended.key) == 32 and SignedControl.from_wire(extended.to_wire()).signed(0)
    bad = [
        ([], '{"request", "key", "signature"}'),
        ({**wire, "key": "zz"}, "must be hex"),
        ({**wire, "key": "00"}, "key is 32 bytes"),
        ({**wire, "request": {**wire["request"], "action": "run"}}, "request: action"),
        ({**wire, "request": {**wire["request"], "name": "a/b"}}, "request: name"),
        ({**wire, "request": {**wire["request"], "channel": "AB" * 28}}, "request: channel"),
        ({**wire, "request": {**wire["request"], "spec": SPEC}}, "a deploy names a spec"),
        ({**wire, "request": {**wire["request"], "extra": 1}}, "extra: unknown field"),
        ({**wire, "request": {**wire["request"], "issued_ms": "1"}}, "request: issued_ms"),
    ]
    for given, why in bad:
        with pytest.raises(ControlRefused, match=why) as refused:
            SignedControl.from_wire(given)
        assert refused.value.status == 400
