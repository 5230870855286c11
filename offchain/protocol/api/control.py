"""Control requests: a renter asks a provider's gateway directly to deploy, stop or show the
logs of a deployment (an endpoint, a pod or a batch job) paid on one of its channels, and a
job's receipt and results.

A request is signed with the channel's renter key (the key that signs its IOUs, named in the
channel's datum), ed25519 over `CONTROL_DOMAIN + network id byte + canonical JSON of the
request`: worthless on another network or as any other kind of signature (IOUs and claims are
CBOR under their own domains). It names the time it was made (`issued_ms`): the gateway takes
it within `TOLERANCE_MS` of its clock, and each `nonce` once within that window: a request
replayed is refused either way.

On the wire, JSON: `{"request": {...}, "key": "<32-byte vkey hex>", "signature": "<hex>"}`.

    signed = SignedControl.sign(key, network_id, ControlRequest.deploy(name, channel, spec))
    response = httpx.post(f"{gateway}/deployments", json=signed.to_wire())
"""

from __future__ import annotations

import dataclasses
import re
import secrets
import time
from typing import Any, Literal

from pycardano import ExtendedSigningKey, SigningKey
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from offchain.chain.utxo import OUT_REF_PATTERN
from offchain.core.errors import UnchainedError
from offchain.protocol.job.jobspec import canonical_json, describe
from offchain.protocol.ledger.payloads import SIGNATURE_BYTES, VKEY_BYTES, sign, verify

CONTROL_DOMAIN = b"UNCHAINED/control/v1"
TOLERANCE_MS = 120_000  # |gateway's clock - issued_ms| at most this
CHANNEL_HEX = re.compile(r"[0-9a-f]{56}")
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")  # as provider.rentals.book.NAME
MAX_TIMESTAMP_MS = 2**63 - 1
NONCE_BYTES = 16
Action = Literal["deploy", "stop", "logs", "status", "receipt", "results"]


class ControlRefused(UnchainedError, ValueError):
    """A control request the gateway does not take: `status` is the HTTP status it answers
    (400 malformed, 401 bad signature, 403 not the channel's renter key or out of time,
    409 name taken), the message says why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class ControlRequest(BaseModel):
    """What the renter asks: `action` on deployment `name`, paid on channel `channel`."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    action: Action
    name: str
    channel: str = Field(description="The channel's id, 56 lower-case hex digits.")
    spec: dict[str, Any] | None = Field(
        None, description="deploy only: a service, pod or channel job spec."
    )
    issued_ms: int = Field(ge=0, le=MAX_TIMESTAMP_MS, description="POSIX ms it was made.")
    nonce: str = Field(pattern=rf"^[0-9a-f]{{{2 * NONCE_BYTES}}}$",
                       description="Random hex: the gateway takes a request once.")  # fmt: skip
    channel_utxo: str | None = Field(
        None,
        pattern=OUT_REF_PATTERN,
        description="deploy on a channel the provider does not serve yet: its TXID#IX",
    )
    channel_terms: str | None = Field(None, pattern=r"^(?:[0-9a-f]{2}){1,1024}$",
                                      description="... and its ChannelTerms, CBOR hex")  # fmt: skip

    @field_validator("name")
    @classmethod
    def _name(cls, name: str) -> str:
        if not NAME.fullmatch(name):
            raise ValueError("letters, digits, '.', '_', '-' (a letter or digit first), "
                             "at most 64")  # fmt: skip
        return name

    @field_validator("channel")
    @classmethod
    def _channel(cls, channel: str) -> str:
        if not CHANNEL_HEX.fullmatch(channel):
            raise ValueError("must be 56 lower-case hex digits (a channel id)")
        return channel

    @model_validator(mode="after")
    def _spec_for_deploy(self) -> ControlRequest:
        if (self.action == "deploy") != (self.spec is not None):
            raise ValueError("a deploy names a spec, a stop or logs request none")
        return self

    @classmethod
    def of(
        cls, action: Action, name: str, channel: bytes, spec: dict[str, Any] | None = None,
        admission: tuple[str, str] | None = None,
    ) -> ControlRequest:  # fmt: skip
        """A request made now; `admission`: the channel's TXID#IX and terms (CBOR hex), for a
        deploy on a channel the provider may not serve yet."""
        utxo, terms = admission or (None, None)
        return cls(action=action, name=name, channel=channel.hex(), spec=spec,
                   issued_ms=time.time_ns() // 1_000_000, nonce=secrets.token_hex(NONCE_BYTES),
                   channel_utxo=utxo, channel_terms=terms)  # fmt: skip

    @property
    def channel_id(self) -> bytes:
        return bytes.fromhex(self.channel)

    def payload(self, network_id: int) -> bytes:
        """The bytes the renter signs (fields left out are not in them)."""
        if not 0 <= network_id < 256:
            raise ValueError("a network id is one byte")
        return CONTROL_DOMAIN + bytes([network_id]) + canonical_json(self.to_wire())

    def to_wire(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)


@dataclasses.dataclass(frozen=True)
class SignedControl:
    request: ControlRequest
    key: bytes  # the 32-byte ed25519 verification key that signed it
    signature: bytes

    @classmethod
    def sign(
        cls, key: SigningKey | ExtendedSigningKey, network_id: int, request: ControlRequest
    ) -> SignedControl:
        vkey = key.to_verification_key().payload[:VKEY_BYTES]  # an extended key: its first half
        return cls(request, vkey, sign(key, request.payload(network_id)))

    def signed(self, network_id: int) -> bool:
        """Whether `key` signed this request for `network_id`."""
        return verify(self.key, self.request.payload(network_id), self.signature)

    def to_wire(self) -> dict[str, Any]:
        return {"request": self.request.to_wire(), "key": self.key.hex(),
                "signature": self.signature.hex()}  # fmt: skip

    @classmethod
    def from_wire(cls, wire: object) -> SignedControl:
        """Read `to_wire`'s form back; ControlRefused (400) naming what is wrong."""
        if not isinstance(wire, dict) or set(wire) != {"request", "key", "signature"}:
            raise ControlRefused(400, 'a control request is {"request", "key", "signature"}')
        key, signature = wire["key"], wire["signature"]
        try:
            key_bytes = bytes.fromhex(key) if isinstance(key, str) else b""
            signature_bytes = bytes.fromhex(signature) if isinstance(signature, str) else b""
        except ValueError as error:
            raise ControlRefused(400, "key and signature must be hex") from error
        if len(key_bytes) != VKEY_BYTES or len(signature_bytes) != SIGNATURE_BYTES:
            raise ControlRefused(400, f"key is {VKEY_BYTES} bytes of hex, signature "
                                 f"{SIGNATURE_BYTES}")  # fmt: skip
        try:
            request = ControlRequest.model_validate(wire["request"])
        except ValidationError as error:
            raise ControlRefused(400, f"request: {describe(error)}") from error
        return cls(request, key_bytes, signature_bytes)

    def check(
        self, network_id: int, renter_vkey: bytes, now_ms: int, tolerance_ms: int = TOLERANCE_MS
    ) -> None:
        """ControlRefused unless this request is signed by `renter_vkey` (the channel's renter
        key) for `network_id` within `tolerance_ms` of `now_ms`."""
        if not self.signed(network_id):
            raise ControlRefused(401, f"the signature does not verify with key {self.key.hex()} "
                                 f"for network {network_id}")  # fmt: skip
        if self.key != renter_vkey:
            raise ControlRefused(403, f"key {self.key.hex()} is not the renter key of channel "
                                 f"{self.request.channel}")  # fmt: skip
        if abs(now_ms - self.request.issued_ms) > tolerance_ms:
            raise ControlRefused(403, f"issued_ms {self.request.issued_ms} is more than "
                                 f"{tolerance_ms // 1000} s from the gateway's clock "
                                 f"({now_ms})")  # fmt: skip
