"""One job as the consumer recorded it when it locked the escrow (`consumer.sdk.store` keeps one
file each): the escrow datum it locked (so results are checked against the provider key it
agreed to, and it can refund or slash with the market gone), the lock's transaction id and the
escrow. Its own module, read only where a record is: pydantic takes longer to import than
`unchained job list` on an empty store takes in all."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:  # imported where a datum is read: `job list` needs no Plutus types
    from offchain.protocol.ledger.types import EscrowDatum


class JobRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    job_id: str
    market_url: str
    provider_id: str
    gpu_model: str
    spec: dict[str, Any]
    datum_cbor: str  # the EscrowDatum as locked (hex CBOR)
    lovelace: int
    created_ms: int
    lock_tx_id: str | None = None
    lock_tx_cbor: str | None = None  # read from records of older versions; now kept pending
    escrow: str | None = None

    @property
    def datum(self) -> EscrowDatum:
        from offchain.protocol.ledger.types import EscrowDatum

        return EscrowDatum.from_cbor(bytes.fromhex(self.datum_cbor))
