"""What the market reads from the chain: the protocol deployment, the chain's time and an
escrow's UTxO checked against the quote it was locked for.

pycardano's Ogmios context is synchronous; async callers run these in a worker thread.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from pathlib import Path

from pycardano import Address, TransactionInput, UTxO

from offchain.chain.context import OgmiosContext, chain_context
from offchain.chain.time import ChainTime, PastHorizon
from offchain.chain.utxo import parse_out_ref, utxo_at
from offchain.market.errors import Invalid
from offchain.market.models import Job
from offchain.protocol.ledger.types import EscrowDatum
from offchain.protocol.tx.deployment import Deployment
from offchain.protocol.tx.deployment_channel import DeploymentFileError
from offchain.protocol.tx.deployment_file import load as load_deployment_file
from offchain.protocol.tx.escrow import escrow_datum, new_escrow
from offchain.protocol.tx.txbuild import BuildError

TIME_TTL_S = 60.0  # how long the era summaries are reused before they are asked for again


class _CachedTime:
    """The chain's slot <-> time conversion, asked for once a minute (or when the tip is past
    its horizon) rather than twice per quote: two Ogmios round trips on each signed request."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._time: ChainTime | None = None
        self._until = 0.0
        self._tip = (0, float("-inf"))  # the last tip slot read, and when (monotonic s)

    def tip_ms(self, context: OgmiosContext, max_age_s: float = 0.0) -> int:
        """The tip's time; a tip read within `max_age_s` is reused (0: always read)."""
        with self._lock:
            tip, read_at = self._tip
        if max_age_s <= 0 or time.monotonic() - read_at > max_age_s:
            tip = context.last_block_slot
            with self._lock:
                self._tip = (tip, time.monotonic())
        with self._lock:
            cached = self._time if time.monotonic() < self._until else None
        if cached is not None:
            with contextlib.suppress(PastHorizon):
                return cached.slot_to_posix_ms(tip)
        fresh = context.chain_time()
        with self._lock:
            self._time, self._until = fresh, time.monotonic() + TIME_TTL_S
        return fresh.slot_to_posix_ms(tip)


@dataclasses.dataclass(frozen=True)
class Chain:
    """The chain behind one Ogmios URL and the deployment the market quotes escrows for."""

    context: OgmiosContext
    deployment: Deployment
    _time: _CachedTime = dataclasses.field(default_factory=_CachedTime, repr=False, compare=False)

    @classmethod
    def connect(cls, ogmios_url: str, deployment_file: Path) -> Chain:
        """Reads the deployment from its file and checks its scripts on the chain."""
        context = chain_context(ogmios_url)
        try:
            deployment = load_deployment_file(deployment_file, context)
        except DeploymentFileError as exc:
            raise Invalid(str(exc), "deployment") from exc
        return cls(context, deployment)

    def now_ms(self, max_age_s: float = 0.0) -> int:
        """The chain's time at its tip: what deadlines and validity bounds are measured in.
        A quote may take a tip read up to `max_age_s` ago (an Ogmios round trip saved per
        request; its deadlines come out that much earlier, never later)."""
        return self._time.tip_ms(self.context, max_age_s)

    def utxo(self, ref: TransactionInput) -> UTxO | None:
        return utxo_at(self.context, ref)


def parse_ref(text: str, field: str) -> TransactionInput:
    """`TXID#IX` parsed, or Invalid naming `field`."""
    try:
        return parse_out_ref(text)
    except ValueError as exc:
        raise Invalid(str(exc), field) from exc


def quoted_escrow(job: Job) -> EscrowDatum:
    """The escrow datum the job's quote asks the consumer to lock."""
    price, units, deadline = job.price_per_unit, job.max_units, job.deadline_ms
    window, allowance = job.settle_window_ms, job.fee_allowance
    assert price is not None and units is not None and deadline is not None, "not quoted"
    assert window is not None and allowance is not None, "not quoted"
    return new_escrow(
        Address.from_primitive(job.consumer_address), Address.from_primitive(job.provider_address),
        job.provider_key, price, units, deadline, window, bytes.fromhex(job.spec_digest),
        allowance, job.start_deadline_ms or 0,
    )  # fmt: skip


def escrow_problems(deployment: Deployment, job: Job, escrow: UTxO) -> list[str]:
    """How the escrow UTxO differs from the job's quote (empty when it is the one quoted):
    the script it sits at, its datum field by field, its lovelace, and no tokens.

    The API calls it when a consumer reports a lock; the chain follower calls it for each
    escrow output it sees."""
    try:
        datum = escrow_datum(deployment, escrow)
    except BuildError as exc:
        return [str(exc)]
    quoted = quoted_escrow(job)
    problems = [
        f"datum.{field.name}: {getattr(datum, field.name)!r} locked, "
        f"{getattr(quoted, field.name)!r} quoted"
        for field in dataclasses.fields(quoted)
        if getattr(datum, field.name) != getattr(quoted, field.name)
    ]
    value = escrow.output.amount
    if value.coin < job.lock_lovelace:
        problems.append(f"value: {value.coin} lovelace locked, {job.lock_lovelace} quoted")
    if value.multi_asset:
        problems.append("value: the escrow holds native tokens (whoever refunds takes them)")
    return problems
