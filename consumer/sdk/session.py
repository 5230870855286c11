"""The consumer SDK: request a job, check its quote, lock its escrow (signed here, or as
unsigned CBOR for an external wallet), follow it, verify and unpack its results, and get the
money back (refund, slash) without the market's help. Async at the edges; blocking chain
reads and builders run in a thread so an event loop never stalls.

    consumer = Consumer(key, market, context, ogmios_url, deployment, store)
    quote = await consumer.sdk.quote(spec)            # checked: QuoteRejected otherwise
    escrow = await consumer.lock(quote)           # built locally, signed, submitted, reported
    async for event in consumer.events(quote.job_id): ...
    result = await consumer.results(quote.job_id, Path("out"))
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from pycardano import Address, Transaction, UTxO
from pycardano.backend.ogmios_v6 import OgmiosV6ChainContext

from consumer.sdk.client import MarketClient
from consumer.sdk.errors import (
    ConsumerError,
    InsufficientFunds,
    NothingToDo,
    NotRefundableYet,
    QuoteRejected,
    ResultMismatch,
)
from consumer.sdk.job_record import JobRecord
from consumer.sdk.keys import ConsumerKey
from consumer.sdk.pending import Prepared, sign_here
from consumer.sdk.quote import CheckedQuote, check_quote, locked_spec
from consumer.sdk.registry_login import PrivateImage, RegistryLogins
from consumer.sdk.store import JobStore, local_time
from consumer.sdk.verified import RESULT_FILE, kept_archive, signed_receipt
from offchain.chain.submit import submit_confirmed
from offchain.chain.time import iso
from offchain.chain.utxo import format_out_ref, parse_out_ref, utxo_at
from offchain.protocol.api.wire import EventPublic, JobPublic, LogPublic, SignedEvidence
from offchain.protocol.checks.bond_check import BondRefused, check_bond
from offchain.protocol.job.jobspec import JobSpec
from offchain.protocol.job.receipt import Receipt
from offchain.protocol.ledger.addresses import from_plutus
from offchain.protocol.ledger.amounts import ADA, ada
from offchain.protocol.ledger.types import EscrowDatum
from offchain.protocol.tx import bond as bonds
from offchain.protocol.tx import escrow as escrows
from offchain.protocol.tx.deployment import Deployment
from offchain.protocol.tx.txbuild import BuildError, Clock

LOCK_FEE_MARGIN = 2 * ADA  # the lock's fee and a change output's min-UTxO, at most


@dataclasses.dataclass(frozen=True)
class VerifiedResult:
    """A result archive whose sha256 is the one the escrow's provider signed a receipt for."""

    job_id: str
    archive: Path
    unpacked: Path | None
    sha256: str
    size: int
    units: int
    cost: int  # price x units, what the provider is paid


@dataclasses.dataclass
class Consumer:
    key: ConsumerKey
    market: MarketClient
    context: OgmiosV6ChainContext
    ogmios_url: str
    deployment: Deployment
    store: JobStore
    min_bond_lovelace: int = 0  # refuse a provider whose counted bond is less (0: none needed)
    default_registry: str = ""  # where a bare image name is read (`registry.default_host`)

    # --- quote and lock ---------------------------------------------------------------

    async def quote(
        self,
        spec: JobSpec,
        gpu_model: str | None = None,
        logins: RegistryLogins | None = None,
        min_delivered: int | None = None,
        start_within_s: int | None = None,
        exclude: Sequence[str] = (),
    ) -> CheckedQuote:
        """Request the job and check the quote (the provider's signed offer, the escrow terms,
        the image's pin: `locked_spec`); the checked quote is recorded locally, with the spec
        as locked, before anything is locked. With `logins` holding an account for the
        image's registry, the image is pinned here with it (a private image: the market has
        no account) and the account sealed to the quoted provider's key goes to the market
        before anything is locked. `min_delivered`: only a provider whose record (the market's
        count from the chain) shows at least that percent delivered. With `start_within_s`, the
        escrow carries a start deadline that far ahead: a provider that has not started the
        job by then is refunded at once (`refund`).
        `exclude`: provider ids the market must not match (a failover's)."""
        private = None
        if logins is not None:
            private = await asyncio.to_thread(
                PrivateImage.pin, spec.image, logins, self.default_registry
            )
            if private is not None:
                spec = spec.model_copy(update={"image": private.image})
        request: dict[str, Any] = {
            "spec": spec.model_dump(mode="json"), "consumer_address": str(self.key.address),
        }  # fmt: skip
        if gpu_model:
            request["gpu_model"] = gpu_model
        if min_delivered is not None:
            request["min_delivered_percent"] = min_delivered
        if start_within_s is not None:
            request["start_within_s"] = start_within_s
        if exclude:
            request["exclude_providers"] = list(exclude)
        quote = await self.market.request_job(request)
        spec = await asyncio.to_thread(locked_spec, spec, quote.image, self.default_registry)
        params = await self.market.escrow_parameters(quote.job_id)
        clock = await asyncio.to_thread(Clock.now, self.context)
        lock = await asyncio.to_thread(
            escrows.lock_lovelace, self.context, self.deployment, params.to_datum()
        )
        checked = check_quote(
            quote, params, spec, self.key.address, self.deployment, self.market.identity,
            clock.tip_ms, lock, gpu_model, start_within_s,
        )  # fmt: skip
        checked = dataclasses.replace(
            checked, bond_lovelace=await asyncio.to_thread(self.checked_bond, checked)
        )
        if private is not None:
            sealed = private.sealed(checked.datum.provider_vkey)
            await self.market.registry_account(checked.job_id, sealed)
        self.store.save(JobRecord(
            job_id=checked.job_id, market_url=self.market.url, provider_id=checked.provider_id,
            gpu_model=checked.gpu_model, spec=spec.model_dump(mode="json"),
            datum_cbor=checked.datum.to_cbor_hex(), lovelace=checked.lovelace,
            created_ms=time.time_ns() // 1_000_000,
        ))  # fmt: skip
        return checked

    def checked_bond(self, quote: CheckedQuote) -> int:
        """The lovelace of the bond the quote's offer names, read from the chain and checked
        to back this provider until the job closes (`check_bond`) with at least the
        consumer's minimum; QuoteRejected, before anything is locked, when it does not count.
        The market checked it too, but a slash is only as good as the bond really there."""
        ref, least = quote.terms.get("bond"), self.min_bond_lovelace
        if ref is None:
            if least:
                raise QuoteRejected(
                    f"provider {quote.provider_id} names no bond and you require one of at "
                    f"least {ada(least)} (--min-bond): nothing locked; lower --min-bond or "
                    "pick another offer (--gpu-model)",
                    min_bond=least,
                )  # fmt: skip
            return 0
        bond = utxo_at(self.context, parse_out_ref(ref))
        if bond is None:
            raise QuoteRejected(
                f"the bond {ref} the provider's offer names is not on chain (spent or never "
                "made), so it backs nothing: nothing locked", bond=ref,
            )  # fmt: skip
        payout = Address.from_primitive(quote.terms["payout_address"])
        try:
            check_bond(self.deployment, bond, quote.datum.provider_vkey, payout, least,
                       quote.datum.close, Clock.now(self.context).tip_ms)  # fmt: skip
        except BondRefused as exc:
            raise QuoteRejected(
                f"the provider's bond does not count: {exc}; nothing locked (--min-bond is "
                f"{ada(least)})", bond=ref, min_bond=least,
            ) from exc  # fmt: skip
        return bond.output.amount.coin

    def balance(self) -> int:
        """Lovelace at the consumer's address (tokens aside)."""
        return sum(utxo.output.amount.coin for utxo in self.context.utxos(self.key.address))

    async def build_lock(self, job_id: str) -> Transaction:
        """The job's escrow lock, unsigned, built here from the checked quote; InsufficientFunds
        when the address cannot pay it (what is missing, where to send it)."""
        record = self.store.get(job_id)
        needed = record.lovelace + LOCK_FEE_MARGIN
        held = await asyncio.to_thread(self.balance)
        try:
            if held < needed:
                raise BuildError("balance below the lock and its fee")
            tx = await asyncio.to_thread(
                escrows.lock, self.context, self.deployment, self.key.address, record.datum,
                record.lovelace,
            )  # fmt: skip
        except BuildError as exc:
            raise InsufficientFunds(
                f"not enough funds: the lock needs {ada(record.lovelace)} plus up to "
                f"{ada(LOCK_FEE_MARGIN)} for its fee, {ada(needed)} in all, at "
                f"{self.key.address}; it holds {ada(held)}. Send at least "
                f"{ada(max(needed - held, 0))} there and submit again. ({exc})",
                address=str(self.key.address), needed=needed, held=held,
            ) from exc  # fmt: skip
        record.lock_tx_id = tx.id.payload.hex()
        self.store.save(record)
        return tx

    async def submit_lock(self, job_id: str, signed: Transaction) -> str:
        """Submit the signed lock, wait for its block, tell the market: the escrow `TXID#IX`."""
        await submit_confirmed(self.ogmios_url, signed)
        return await self.locked(job_id, signed)

    async def locked(self, job_id: str, signed: Transaction) -> str:
        """Once the signed lock is in a block: record its escrow `TXID#IX`, tell the market."""
        record = self.store.get(job_id)
        record.escrow = format_out_ref(escrows.lock_escrow(signed.id))
        self.store.save(record)
        await self.market.report_escrow(job_id, record.escrow)
        return record.escrow

    async def lock(self, job_id: str) -> str:
        """Build, sign with the consumer's key and submit the job's lock; the escrow."""
        return await self.run(Prepared("lock", await self.build_lock(job_id), {"job_id": job_id}))

    async def run(self, prepared: Prepared) -> Any:
        """`prepared` signed with the consumer's key, submitted, and finished (`finish`)."""
        signed = await sign_here(self.key, self.ogmios_url, prepared)
        return await self.finish(prepared.kind, prepared.facts, signed)

    async def finish(self, kind: str, facts: dict[str, Any], signed: Transaction) -> Any:
        """What follows a job transaction's block: a lock's escrow is recorded and reported
        (the escrow); a cancel is told (`Cancelled`); a refund or a slash needs nothing more
        (the transaction)."""
        if kind == "lock":
            return await self.locked(facts["job_id"], signed)
        if kind == "cancel":
            from consumer.sdk.cancel import cancelled  # it builds on this module

            return cancelled(facts, signed)
        return signed

    # --- follow -------------------------------------------------------------------------

    async def status(self, job_id: str) -> JobPublic:
        return await self.market.job(job_id)

    def events(self, job_id: str) -> AsyncIterator[EventPublic]:
        return self.market.events(job_id)

    async def logs(self, job_id: str, after: int = -1) -> list[LogPublic]:
        return await self.market.logs(job_id, after)

    # --- results ------------------------------------------------------------------------

    async def results(self, job_id: str, into: Path, unpack: bool = True) -> VerifiedResult:
        """Download the result archive into `into`, check its sha256 against the receipt and
        the receipt's signature against the escrow's provider key; only then unpack it (into
        `into/out`). ResultMismatch when either fails: the download is removed."""
        record = self.store.get(job_id)
        signed = await self.market.signatures(job_id)
        if signed.receipt_signature is None or signed.receipt_result_hash is None:
            state = (await self.market.job(job_id)).state
            raise ConsumerError(f"job {job_id} has no receipt yet (it is {state})", state=state)
        receipt = self.check_receipt(record, signed)
        into.mkdir(parents=True, exist_ok=True)
        partial = into / f".{RESULT_FILE}.part"
        arrived = await self.market.download_result(job_id, partial)
        kept = kept_receipt(record, receipt, self.deployment)
        archive, unpacked = kept_archive(partial, arrived, receipt, into, unpack, kept)
        units = receipt.units
        return VerifiedResult(
            job_id, archive, unpacked, arrived, archive.stat().st_size, units,
            record.datum.price_per_unit * units,
        )  # fmt: skip

    def check_receipt(self, record: JobRecord, signed: SignedEvidence) -> Receipt:
        """ResultMismatch unless the receipt names the job's escrow and is signed by the
        provider key the consumer locked for (its own record, not the market's word)."""
        if record.escrow is None or signed.escrow != record.escrow:
            raise ResultMismatch(
                f"the receipt is for escrow {signed.escrow}, not this job's {record.escrow}"
            )
        ref = parse_out_ref(record.escrow)
        vkey = record.datum.provider_vkey
        whose = "the escrow's provider key"
        return signed_receipt(ref, signed.model_dump(), vkey, self.deployment, "receipt_", whose)

    # --- money back ---------------------------------------------------------------------

    async def refund(self, job_id: str) -> Transaction:
        """Refund the escrow to the consumer once deadline + settle window passed (chain
        time), or at once after its start deadline when its provider did not start it; the
        confirmed transaction."""
        return await self.run(await self.prepare_refund(job_id))

    async def prepare_refund(self, job_id: str) -> Prepared:
        """The escrow's refund to the consumer, unsigned (NotRefundableYet says when)."""
        escrow = await asyncio.to_thread(self._refundable, job_id)
        tx = await asyncio.to_thread(
            escrows.refund, self.context, self.deployment, escrow, self.key.address
        )
        why = await asyncio.to_thread(self.refund_reason, job_id)
        return Prepared("refund", tx, {"job_id": job_id, "why": why})

    async def slash(self, job_id: str) -> Transaction:
        """Refund and take the slash share of the provider's bond in one transaction, with the
        provider's signed acceptance of the escrow; the confirmed transaction."""
        return await self.run(await self.prepare_slash(job_id))

    async def prepare_slash(self, job_id: str) -> Prepared:
        """The refund with the bond's slash, unsigned (the acceptance read from the market)."""
        signed = await self.market.signatures(job_id)
        acceptance = signed.acceptance_signature
        if acceptance is None:
            raise NothingToDo(
                f"the provider never accepted job {job_id}, so there is nothing to slash: "
                f"`unchained job refund {job_id}` returns the escrow"
            )
        escrow = await asyncio.to_thread(self._refundable, job_id)
        bond = await asyncio.to_thread(self._provider_bond, job_id)
        tx = await asyncio.to_thread(
            bonds.slash, self.context, self.deployment, escrow, bond, bytes.fromhex(acceptance),
            self.key.address,
        )  # fmt: skip
        return Prepared("slash", tx, {"job_id": job_id})

    def _refundable(self, job_id: str) -> UTxO:
        """The job's escrow UTxO if it can be refunded now; NotRefundableYet says when."""
        record = self.store.get(job_id)
        escrow, datum = self.current_escrow(record)
        wait = Wait.after(Clock.now(self.context), escrows.refundable_after(datum))
        if wait is not None:
            raise NotRefundableYet(
                f"escrow {record.escrow} is not refundable yet: {wait}"
                + (f" unless its provider starts the job before {iso(datum.start_deadline)}"
                   if datum.start_deadline else "")
                + f". Run `unchained job refund {job_id}` then.", refundable_at_ms=wait.at_ms,
                chain_now_ms=wait.chain_now_ms, local_eta_ms=wait.local_ms,
            )  # fmt: skip
        return escrow

    def refund_reason(self, job_id: str) -> str:
        """Why the job's escrow is refundable now (`_refundable` passed): its provider did not
        start it by its start deadline (an early refund), or its close passed."""
        datum = self.current_escrow(self.store.get(job_id))[1]
        if datum.start_deadline and datum.start_deadline < datum.close:
            return (
                f"the provider did not start the job by its start deadline "
                f"{iso(datum.start_deadline)}: refunded early, long before the close"
            )
        return f"the escrow was not settled by its close {iso(datum.close)}"

    def current_escrow(self, record: JobRecord) -> tuple[UTxO, EscrowDatum]:
        """Where the job's money is now, and its datum: the escrow it locked, or, once its
        provider started it (Start moves it), the escrow that Start left, which the record
        follows from then on (the provider's receipt names it)."""
        if record.escrow is None:
            raise NothingToDo(f"job {record.job_id} has no escrow: nothing was locked")
        escrow = utxo_at(self.context, parse_out_ref(record.escrow))
        datum = record.datum
        if escrow is not None:
            return escrow, escrows.escrow_datum(self.deployment, escrow)
        if datum.start_deadline:
            started = escrows.started_utxo(self.context, self.deployment, datum, record.lovelace)
            if started is not None:
                record.escrow = format_out_ref(started.input)
                self.store.save(record)
                return started, datum.started
        raise NothingToDo(
            f"escrow {record.escrow} is spent already (settled, refunded or slashed): "
            f"see `unchained job status {record.job_id}`"
        )

    def _provider_bond(self, job_id: str) -> UTxO:
        datum = self.store.get(job_id).datum
        provider = from_plutus(datum.provider, self.deployment.network)
        found = bonds.bonds_of(self.context, self.deployment, provider, datum.provider_vkey)
        if not found:
            raise NothingToDo(
                f"the provider has no bond on chain to slash: `unchained job refund {job_id}` "
                "returns the escrow"
            )
        return max(found, key=lambda pair: pair[0].output.amount.coin)[0]


@dataclasses.dataclass(frozen=True)
class Wait:
    """How long until a script sees a time strictly after a deadline (a refund's close, a
    channel's closing_at): the first such slot's time, on the chain and on this machine."""

    at_ms: int  # chain time
    chain_now_ms: int
    local_ms: int  # about when that is on this machine's clock

    @classmethod
    def after(cls, clock: Clock, posix_ms: int) -> Wait | None:
        """None when the chain's tip is past `posix_ms` already."""
        first = clock.first_slot_after(posix_ms)
        if clock.tip_slot >= first:
            return None
        at_ms = clock.time.slot_to_posix_ms(first)
        return cls(at_ms, clock.tip_ms, time.time_ns() // 1_000_000 + at_ms - clock.tip_ms)

    def __str__(self) -> str:
        return (f"at {iso(self.at_ms)} chain time (about {local_time(self.local_ms)} on this "
                f"machine's clock; the chain is at {iso(self.chain_now_ms)})")  # fmt: skip


def kept_receipt(record: JobRecord, receipt: Receipt, deployment: Deployment) -> str:
    """The receipt kept beside a verified result: its self-contained record (what was signed,
    for which escrow), the job and the provider key that signed it."""
    kept = {
        **receipt.record(deployment),
        "job_id": record.job_id,
        "provider_vkey": record.datum.provider_vkey.hex(),
    }
    return json.dumps(kept, indent=2, sort_keys=True) + "\n"
