"""The market's public answers as every party reads them: the market answers with these
models (`offchain.market.schemas` takes them as they are) and the consumer and the provider
parse its JSON into them, so one definition says what each field is. Not for the commands
that must start at once: pydantic is imported here."""

from __future__ import annotations

from typing import Any, TypeVar

from pycardano import Address
from pydantic import BaseModel, Field, ValidationError

from offchain.protocol.escrow import new_escrow
from offchain.protocol.market_errors import MarketRefused
from offchain.protocol.types import EscrowDatum

Model = TypeVar("Model", bound=BaseModel)


class EscrowParameters(BaseModel):
    """What to lock: the escrow address's script, the datum's fields and the lovelace."""

    escrow_hash: str
    network_id: int
    consumer: str
    provider: str
    provider_vkey: str
    price_per_unit: int
    max_units: int
    deadline: int
    settle_window: int
    job_id: str
    fee_allowance: int
    lovelace: int

    def to_datum(self) -> EscrowDatum:
        """The escrow datum these parameters ask for, as the validators read it."""
        return new_escrow(
            Address.from_primitive(self.consumer), Address.from_primitive(self.provider),
            bytes.fromhex(self.provider_vkey), self.price_per_unit, self.max_units,
            self.deadline, self.settle_window, bytes.fromhex(self.job_id), self.fee_allowance,
        )  # fmt: skip


class Assignment(BaseModel):
    """A funded job for the provider: the spec to run and the escrow to check on chain first."""

    job_id: str
    escrow: str
    spec: dict[str, Any]
    price_per_unit: int
    max_units: int
    deadline_ms: int
    cancel_tx: str | None = Field(
        None, description="The renter's Cancel of this escrow (CBOR hex), when it asked to "
        "cancel: sign it if the job has not started (check it first), stop the job if it has.",
    )  # fmt: skip


def parse(model: type[Model], answer: Any, what: str) -> Model:
    """The market's JSON `answer` to `what` as `model`; MarketRefused when it is not one
    (an older or broken market), never a traceback."""
    try:
        return model.model_validate(answer)
    except ValidationError as exc:
        raise MarketRefused(
            f"the market's answer to {what} is not a {model.__name__}: {exc}",
            answer=str(answer)[:500],
        ) from exc
