"""What each explorer page reads, as plain JSON-ready dicts (the HTML and the JSON of a page are
the same data). Every list is keyset-paginated and every query is served by an index declared
here or on the table, sized for 10,000 jobs, 1,000 providers and 100,000 transactions.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from collections.abc import Callable, Sequence
from typing import Any

from pycardano import ScriptHash
from sqlalchemy import JSON, Index, Text, and_, cast, func, or_
from sqlmodel import Session, col, select

from offchain.chain.time import ChainTime, PastHorizon
from offchain.chain.utxo import format_out_ref, out_ref_of
from offchain.market.errors import Invalid, NotFound
from offchain.market.models import (
    Bond,
    CancelState,
    Cause,
    ChainBlock,
    ChainTx,
    ChainTxOut,
    Channel,
    ChannelState,
    Job,
    JobEvent,
    JobState,
    Offer,
    Provider,
    Rental,
)
from offchain.market.services import health, job_ids, reputation
from offchain.market.services import jobs as job_states
from offchain.market.services.id_prefix import full_id
from offchain.market.services.offers import SLICED, slice_terms
from offchain.market.services.storage import blob_bytes
from offchain.protocol.checks.bond_check import covers_before
from offchain.protocol.job.job_state import SETTLE_NEXT
from offchain.protocol.job.metering import MeteringRecord
from offchain.protocol.ledger.split import settle_split
from offchain.protocol.tx.deployment import Deployment

S = JobState
PAGE = 50
RECENT = 8
MEDIAN_OF = 200  # settlements the home page's median is taken over
DAY_MS = 86_400_000
BUSY = (S.ACCEPTED, S.RUNNING)
DONE = (S.COMPLETED, S.SETTLING, S.SETTLED)
HEIGHT_DIGITS = 12  # a longer number is a hash that happens to have no letters
MAX_INT64 = (1 << 63) - 1
# A keyset cursor as a page's `next` writes it: a number (ms or slot) and the row's key (a job
# id, an out-ref; any ASCII word compares, e.g. `z` to start after every key of that number);
# ASCII digits only, so "²" or 5,000 digits are refused, never parsed.
CURSOR = re.compile(r"([0-9]{1,19})\.([0-9A-Za-z_#-]{1,80})")
SUM_SPLIT = 1 << 32
# The job's spec read as JSON: PostgreSQL casts its text to json; SQLite must read the text as
# it is (its CAST AS JSON is a numeric cast, 0, and every spec's GPUs counted as none).
SPEC_JSON = JSON().with_variant(Text(), "sqlite")
log = logging.getLogger(__name__)

# The explorer's indexes on the market's tables: jobs newest first under each filter, and
# settlements by the slot they landed in.
_job = Job.__table__.c  # type: ignore[attr-defined]
_event = JobEvent.__table__.c  # type: ignore[attr-defined]
INDEXES = (
    Index("ix_explorer_job_created", _job.created_at_ms, _job.id),
    Index("ix_explorer_job_state", _job.state, _job.created_at_ms, _job.id),
    Index("ix_explorer_job_locked", _job.state, _job.lock_lovelace),
    Index("ix_explorer_job_provider", _job.provider_id, _job.created_at_ms, _job.id),
    Index("ix_explorer_job_consumer", _job.consumer_id, _job.created_at_ms, _job.id),
    Index("ix_explorer_job_gpu", _job.gpu_model, _job.created_at_ms, _job.id),
    Index("ix_explorer_event_state_slot", _event.to_state, _event.slot),
)


@dataclasses.dataclass(frozen=True)
class Scripts:
    """The deployment as pages need it: the settle script receipts are signed for, and the
    bond terms that say which jobs a bond covers."""

    network_id: int
    settle_hash: bytes
    notice_ms: int
    refund_window_ms: int

    @classmethod
    def of(cls, deployment: Deployment) -> Scripts:
        return cls(
            deployment.network_id, deployment.settle_hash.payload, deployment.notice_ms,
            deployment.refund_window_ms,
        )  # fmt: skip

    def covers_before(self, unbonding_since: int | None, now_ms: int) -> int:
        """Jobs closing before this time are covered by a bond (`bond_check.covers_before`)."""
        return covers_before(self.notice_ms, self.refund_window_ms, unbonding_since, now_ms)


@dataclasses.dataclass(frozen=True)
class Context:
    """What pages read besides the database: our scripts, the chain's clock (None until it
    could be asked), the market's clock and how long a heartbeat keeps a provider online."""

    scripts: Scripts
    time: ChainTime | None
    now_ms: int
    online_ms: int

    def slot_ms(self, slot: int | None) -> int | None:
        if slot is None or self.time is None:
            return None
        try:
            return self.time.slot_to_posix_ms(slot)
        except PastHorizon:
            return None


def tip_ms(session: Session, ctx: Context) -> int | None:
    """The time of the newest block the index holds (None before the first, or when it
    cannot be read: the page's countdowns then use the market's clock, as `_panel` does)."""
    return _panel(session, "tip", lambda: ctx.slot_ms(
        session.exec(select(func.max(ChainBlock.slot))).one()), [])  # fmt: skip


# --- rows as pages show them ------------------------------------------------------------------


def _block(block: ChainBlock, ctx: Context) -> dict[str, Any]:
    return {
        "height": block.height, "slot": block.slot, "id": block.block_id,
        "time_ms": ctx.slot_ms(block.slot), "tx_count": block.tx_count,
        "indexed_txs": block.indexed_txs,
    }  # fmt: skip


def _job_row(job: Job) -> dict[str, Any]:
    return {
        "id": job.id, "state": str(job.state), "gpu_model": job.gpu_model,
        "outcome": job.outcome and str(job.outcome), "exit_code": job.exit_code,
        "provider_id": job.provider_id, "consumer_id": job.consumer_id,
        "price_per_unit": job.price_per_unit, "lock_lovelace": job.lock_lovelace,
        "created_at_ms": job.created_at_ms, "updated_at_ms": job.updated_at_ms,
    }  # fmt: skip


def _event_row(event: JobEvent) -> dict[str, Any]:
    """A timeline row as anyone may see it: the failure the provider reported through the API
    carries its own words (its reason), which are its consumer's only, like the logs."""
    private = event.to_state == S.FAILED and event.cause == Cause.API
    return {
        "id": event.id, "at_ms": event.at_ms,
        "from_state": str(event.from_state) if event.from_state else None,
        "to_state": str(event.to_state), "cause": str(event.cause),
        "detail": "" if private else event.detail,
        "slot": event.slot, "block_height": event.block_height, "tx_id": event.tx_id,
    }  # fmt: skip


def _exact_sum(value: Any) -> tuple[Any, Any]:
    """`sum(value)` of non-negative integers as two sums that cannot overflow (SQLite's sum()
    fails past 2**63, and total() is a float): of the high and the low 32 bits of each value,
    joined exactly by `_joined`."""
    return func.sum(value // SUM_SPLIT), func.sum(value % SUM_SPLIT)


def _joined(high: Any, low: Any) -> int:
    """The exact sum from `_exact_sum`'s two parts (None for no rows; a Decimal from
    PostgreSQL, whose integer sums are numeric)."""
    return int(high or 0) * SUM_SPLIT + int(low or 0)


# --- home -------------------------------------------------------------------------------------


def _tip(session: Session) -> ChainBlock | None:
    return session.exec(select(ChainBlock).order_by(col(ChainBlock.slot).desc()).limit(1)).first()


def _gpus(session: Session, since_ms: int) -> list[dict[str, Any]]:
    """Per GPU model: GPUs offered by online providers, how many run a job, the lowest price."""
    offered = session.exec(
        select(Offer.gpu_model, func.sum(Offer.gpu_count), func.min(Offer.price_per_unit))
        .join(Provider, col(Provider.id) == col(Offer.provider_id))
        .where(col(Offer.active), col(Provider.last_heartbeat_ms) >= since_ms)
        .group_by(col(Offer.gpu_model))
    ).all()  # fmt: skip
    gpus = cast(col(Job.spec), SPEC_JSON)[("resources", "gpus")].as_integer()
    running = session.exec(
        select(Job.gpu_model, func.sum(gpus)).where(col(Job.state).in_(BUSY))
        .group_by(col(Job.gpu_model))
    ).all()  # fmt: skip
    busy = {model or "": int(n or 0) for model, n in running}
    slices = _slices(session, since_ms)
    prices: dict[str, tuple[int, int | None]] = {
        model or "": (total, price) for model, total, price in offered
    }
    models = sorted(model for model in set(prices) | set(busy) | set(slices) if model)  # a GPU's
    return [
        {
            "model": model, "offered": prices.get(model, (0, None))[0],
            "busy": busy.get(model, 0),
            "free": max(0, prices.get(model, (0, None))[0] - busy.get(model, 0)),
            "price_per_unit": prices.get(model, (0, None))[1],
            "slices": slices.get(model),
        }
        for model in models
    ]  # fmt: skip


def _slices(session: Session, since_ms: int) -> dict[str, dict[str, Any]]:
    """Per GPU model: the slices of GPUs online providers offer (their offers' gpu_slices),
    how many run a job asking a fraction, the lowest price and each size with its isolation."""
    bodies = session.exec(
        select(Offer.body).join(Provider, col(Provider.id) == col(Offer.provider_id))
        .where(col(Offer.active), col(Provider.last_heartbeat_ms) >= since_ms,
               col(Offer.body).contains('"gpu_slices":', autoescape=True))
    ).all()  # fmt: skip
    found: dict[str, dict[str, Any]] = {}
    for body in bodies:
        for entry in slice_terms(body):
            model = found.setdefault(entry.gpu_model, {"offered": 0, "busy": 0, "sizes": set()})
            model["offered"] += entry.count
            least = model.get("price_per_unit")
            model["price_per_unit"] = min(entry.price_per_unit, least or entry.price_per_unit)
            model["sizes"].add((entry.memory_mib, entry.sm_percent, entry.isolation))
    held = session.exec(
        select(Job.gpu_model, func.count()).where(col(Job.state).in_(BUSY), SLICED)
        .group_by(col(Job.gpu_model))
    ).all()  # fmt: skip
    for gpu_model, n in held:
        if gpu_model in found:
            found[gpu_model]["busy"] = int(n)
    for model in found.values():
        model["free"] = max(0, model["offered"] - model["busy"])
        model["sizes"] = [{"memory_mib": memory, "sm_percent": sm, "isolation": isolation}
                          for memory, sm, isolation in sorted(model["sizes"])]  # fmt: skip
    return found


def _settled_since(session: Session, slot: int) -> int:
    due = _exact_sum(col(Job.price_per_unit) * col(Job.receipt_units))
    query = (
        select(*due).join(JobEvent, col(JobEvent.job_id) == col(Job.id))
        .where(col(JobEvent.to_state) == S.SETTLED, col(JobEvent.slot) >= slot)
    )  # fmt: skip
    return _joined(*session.exec(query).one())


def _median_settle_ms(session: Session) -> int | None:
    """Median ms from a receipt (completed) to its settlement, over the latest settlements."""
    settled = session.exec(
        select(JobEvent.job_id, JobEvent.at_ms).where(col(JobEvent.to_state) == S.SETTLED)
        .order_by(col(JobEvent.slot).desc()).limit(MEDIAN_OF)
    ).all()  # fmt: skip
    completed = dict(
        session.exec(
            select(JobEvent.job_id, func.max(JobEvent.at_ms))
            .where(col(JobEvent.job_id).in_([j for j, _ in settled]),
                   col(JobEvent.to_state) == S.COMPLETED)
            .group_by(col(JobEvent.job_id))
        ).all()
    )  # fmt: skip
    waits = sorted(at - completed[job] for job, at in settled if job in completed)
    return waits[len(waits) // 2] if waits else None


def _day_ago(ctx: Context, tip: ChainBlock | None) -> int | None:
    """The slot a day before the tip, if the chain's clock can say."""
    tip_ms = ctx.slot_ms(tip.slot) if tip else None
    if tip_ms is None or ctx.time is None:
        return None
    try:
        return ctx.time.posix_ms_to_slot(max(tip_ms - DAY_MS, ctx.time.system_start_ms))
    except PastHorizon:
        return None


def _jobs_by_state(session: Session) -> dict[str, tuple[int, int]]:
    """Per state: how many jobs, and the lovelace their quotes lock (summed exactly)."""
    rows = session.exec(
        select(Job.state, func.count(), *_exact_sum(col(Job.lock_lovelace)))
        .group_by(col(Job.state))
    ).all()  # fmt: skip
    return {str(state): (n, _joined(high, low)) for state, n, high, low in rows}


def _channels_now(session: Session) -> dict[str, int]:
    """Channels not gone (open or closing): how many, and the lovelace they hold (exact)."""
    live = (ChannelState.OPEN, ChannelState.CLOSING)
    count, high, low = session.exec(
        select(func.count(), *_exact_sum(col(Channel.lovelace)))
        .where(col(Channel.state).in_(live))
    ).one()  # fmt: skip
    return {"count": count, "lovelace": _joined(high, low)}


def _deployments_now(session: Session) -> dict[str, int]:
    """Deployments by state, as their providers last reported them."""
    rows = session.exec(
        select(Rental.state, func.count()).group_by(col(Rental.state))
    ).all()  # fmt: skip
    return {str(state): n for state, n in rows}


def _settled_24h(session: Session, ctx: Context) -> int | None:
    day_ago = _day_ago(ctx, _tip(session))
    return _settled_since(session, day_ago) if day_ago is not None else None


def _panel(session: Session, name: str, build: Callable[[], Any], failed: list[str]) -> Any:
    """One figure or list of the home page: if it cannot be read it is None and named in
    `failed` (shown as unavailable) while the rest of the page stands; the session's failed
    transaction is rolled back so the next panel reads on (PostgreSQL refuses until then)."""
    try:
        return build()
    except Exception:  # any failure of one panel, whatever its kind, must not take the page
        log.exception("the explorer's home panel %s could not be read", name)
        session.rollback()
        failed.append(name)
        return None


def home(session: Session, ctx: Context) -> dict[str, Any]:
    """The home page's panels; `unavailable` names those that could not be read."""
    since = ctx.now_ms - ctx.online_ms
    failed: list[str] = []
    tip = _panel(session, "tip", lambda: _tip(session), failed)
    by_state = _panel(session, "jobs_running", lambda: _jobs_by_state(session), failed)
    panels: dict[str, Callable[[], Any]] = {
        "providers_online": lambda: session.exec(
            select(func.count()).select_from(Provider)
            .where(col(Provider.last_heartbeat_ms) >= since)
        ).one(),
        "gpus": lambda: _gpus(session, since),
        "settled_24h_lovelace": lambda: _settled_24h(session, ctx),
        "median_settle_ms": lambda: _median_settle_ms(session),
        "channels": lambda: _channels_now(session),
        "deployments": lambda: _deployments_now(session),
        "blocks": lambda: [
            _block(b, ctx) for b in session.exec(
                select(ChainBlock).order_by(col(ChainBlock.slot).desc()).limit(RECENT)
            )
        ],
        "jobs": lambda: [
            _job_row(j) for j in session.exec(
                select(Job).order_by(col(Job.created_at_ms).desc(), col(Job.id).desc())
                .limit(RECENT)
            )
        ],
    }  # fmt: skip
    shown = {name: _panel(session, name, build, failed) for name, build in panels.items()}
    if by_state is None:
        failed.append("escrow_lovelace")
    counted = by_state or {}
    return {
        "tip": _block(tip, ctx) if tip else None,
        **shown,
        "jobs_running": sum(counted.get(state, (0, 0))[0] for state in BUSY),
        "escrow_lovelace": sum(counted.get(state, (0, 0))[1] for state in job_states.LOCKED),
        "unavailable": failed,
    }


# --- jobs -------------------------------------------------------------------------------------


def _cursor(text: str | None) -> tuple[int, str] | None:
    """A keyset cursor `number.key` as a page's `next` wrote it (None: from the newest); any
    other text is Invalid, naming `after`."""
    if not text:
        return None
    found = CURSOR.fullmatch(text)
    if found is None or int(found[1]) > MAX_INT64:
        raise Invalid(f"not a page cursor (`number.key`, as a page's `next`): {text[:80]!r}",
                      "after")  # fmt: skip
    return int(found[1]), found[2]


def row_id(text: str) -> int:
    """A cursor's key that is a row's number (`keyset`'s `key_type`): ValueError if not one."""
    if not (text.isascii() and text.isdigit()) or int(text) > MAX_INT64:
        raise ValueError(f"not a row number: {text!r}")
    return int(text)


def keyset(
    session: Session, query: Any, number: Any, key: Any, after: str | None, size: int = PAGE,
    key_type: Callable[[str], Any] = str,
) -> tuple[list[Any], str | None]:  # fmt: skip
    """One page of `query`'s rows, newest first by (`number`, `key`) after the cursor `after`,
    and the cursor of the page after it (None on the last page). `key_type`: the key as its
    column compares it (`int` for a row number: a cursor with another key is Invalid)."""
    cursor = _cursor(after)
    if cursor is not None:
        at, last = cursor
        try:
            last = key_type(last)
        except ValueError:
            raise Invalid(f"not a page cursor of this list: {after!r}", "after") from None
        query = query.where(or_(col(number) < at, and_(col(number) == at, col(key) < last)))
    order = (col(number).desc(), col(key).desc())
    rows = session.exec(query.order_by(*order).limit(size + 1)).all()
    page = rows[:size]
    if len(rows) <= size:
        return page, None
    return page, f"{getattr(page[-1], number.key)}.{getattr(page[-1], key.key)}"


def filtered(
    query: Any, columns: dict[str, Any], filters: dict[str, str]
) -> tuple[Any, dict[str, str]]:
    """`query` narrowed to the rows whose column equals each filter given (by name in
    `columns`), and every filter as the page's form shows it back."""
    for name, column in columns.items():
        if filters.get(name):
            query = query.where(col(column) == filters[name])
    return query, {name: filters.get(name, "") for name in columns}


JOB_COLUMNS = {"state": Job.state, "provider": Job.provider_id, "consumer": Job.consumer_id,
               "gpu": Job.gpu_model}  # fmt: skip


def job_list(session: Session, filters: dict[str, str]) -> dict[str, Any]:
    """Jobs newest first under the filters (state, provider id, consumer id, GPU model), one
    page after the `after` cursor."""
    query, shown = filtered(select(Job), JOB_COLUMNS, filters)
    page, more = keyset(session, query, Job.created_at_ms, Job.id, filters.get("after"))
    return {
        "filters": shown,
        "states": [state.value for state in JobState],
        "jobs": [_job_row(job) for job in page],
        "next": more,
    }


def _metering(session: Session, job: Job) -> dict[str, Any] | None:
    """The metering record the receipt's evidence hash names, if its provider stored it here."""
    stored = blob_bytes(session, job.receipt_evidence_hash) if job.receipt_evidence_hash else None
    if stored is None:
        return None
    record = MeteringRecord.model_validate_json(stored)
    return {
        "record": record.model_dump(mode="json"),
        "matches": record.digest() == job.receipt_evidence_hash,
    }


def _receipt(job: Job, scripts: Scripts) -> dict[str, Any] | None:
    receipt = job.receipt
    if receipt is None or job.provider_vkey is None:
        return None
    vkey = job.provider_key
    ok = receipt.signed_by(vkey, scripts.network_id, ScriptHash(scripts.settle_hash))
    return {**receipt.body(), "provider_vkey": job.provider_vkey, "verifies": ok}


def _split(session: Session, job: Job) -> dict[str, int] | None:
    """What a settle of the job's receipt gives each party out of its escrow, as the settle
    script splits it: the escrow's lovelace as indexed (the quote's lock until then)."""
    indexed = session.get(ChainTxOut, job.escrow_ref) if job.escrow_ref else None
    locked = indexed.lovelace if indexed is not None else job.lock_lovelace
    terms = (locked, job.price_per_unit, job.receipt_units, job.max_units, job.fee_allowance)
    if any(term is None for term in terms):
        return None
    try:
        split = settle_split(*terms)  # type: ignore[arg-type]
    except ValueError:
        return None
    return {"provider": split.provider, "consumer": split.consumer, "fee": split.fee}


def job_page(session: Session, ctx: Context, job_id: str) -> dict[str, Any]:
    """The job `job_id` names (its id, a unique prefix, its escrow ref or spec digest)."""
    job = job_ids.resolve(session, job_id)
    events = job_states.events(session, job.id)
    return {
        "job": _job_row(job) | {
            "spec": json.loads(job.spec), "spec_digest": job.spec_digest,
            "consumer_address": job.consumer_address, "provider_address": job.provider_address,
            "max_price": job.max_price,
            "quote": {
                "price_per_unit": job.price_per_unit, "max_units": job.max_units,
                "deadline_ms": job.deadline_ms, "settle_window_ms": job.settle_window_ms,
                "fee_allowance": job.fee_allowance, "lock_lovelace": job.lock_lovelace,
                "expires_ms": job.quote_expires_ms,
            },
            "escrow_ref": job.escrow_ref, "settle_tx": job.settle_tx,
            "result_sha256": job.result_sha256, "cancel": _cancel(job, events),
            "never_ran": _never_ran(job),
            # what is left to happen, where the job waits on no one's action
            "next": SETTLE_NEXT if job.state == S.COMPLETED else None,
        },
        "events": [_event_row(e) for e in events],
        "receipt": _receipt(job, ctx.scripts),
        "split": _split(session, job),
        "metering": _metering(session, job),
    }  # fmt: skip


def _never_ran(job: Job) -> str | None:
    """Why a job never ran, when its provider released the escrow with a zero-unit receipt (a
    refusal, a failure before the start). Public, unlike a run's failure, whose words may
    carry the renter's output: these are the provider's words about its own machine."""
    return job.failure_reason if job.receipt_units == 0 else None


CANCEL_WORDS = {
    CancelState.REQUESTED: "requested by the renter, waiting for the provider's signature",
    CancelState.SIGNED: "signed by the provider, for the renter to submit",
    CancelState.STOPPING: "the job had started: stopped, its receipt bills the units it used",
    CancelState.REFUSED: "refused by the provider",
}


def _cancel(job: Job, events: Sequence[JobEvent]) -> dict[str, Any] | None:
    """The renter's cancel as it stands (None without one), with its transaction once on
    chain."""
    on_chain = next((e.tx_id for e in events if e.to_state == S.CANCELLED), None)
    if job.cancel_state is None and on_chain is None:
        return None
    return {
        "words": "on chain" if on_chain or job.cancel_state is None
        else CANCEL_WORDS[job.cancel_state],
        "refusal": job.cancel_refusal, "tx": on_chain,
    }  # fmt: skip


def events_after(session: Session, job_id: str, after: int) -> list[dict[str, Any]]:
    return [_event_row(e) for e in job_states.events(session, job_id, after)]


# --- providers --------------------------------------------------------------------------------


def _counts(session: Session, provider_ids: Sequence[str]) -> dict[str, dict[str, int]]:
    rows = session.exec(
        select(Job.provider_id, Job.state, func.count())
        .where(col(Job.provider_id).in_(provider_ids))
        .group_by(col(Job.provider_id), col(Job.state))
    ).all()  # fmt: skip
    counts: dict[str, dict[str, int]] = {
        p: {"done": 0, "failed": 0, "slashed": 0} for p in provider_ids
    }
    for provider, state, n in rows:
        bucket = "done" if state in DONE else str(state) if state in (S.FAILED, S.SLASHED) else None
        if bucket is not None and provider is not None:
            counts[provider][bucket] += n
    return counts


def _uptime(online: dict[str, int]) -> dict[str, dict[str, int]]:
    return {name: {"online_ms": online[name], "of_ms": window}
            for name, window in health.WINDOWS.items()}  # fmt: skip


def _provider_row(
    provider: Provider, offers: list[Offer], counts: dict[str, int], online: dict[str, int],
    ctx: Context, record: reputation.Reputation,
) -> dict[str, Any]:  # fmt: skip
    return {
        "id": provider.id, "payout_address": provider.payout_address,
        "online": provider.last_heartbeat_ms >= ctx.now_ms - ctx.online_ms,
        "last_heartbeat_ms": provider.last_heartbeat_ms,
        "offline_since_ms": provider.offline_since_ms,
        "gpus": [{"model": o.gpu_model, "count": o.gpu_count, "price_per_unit": o.price_per_unit}
                 for o in offers],
        # the bundles of an offer with no GPU: what a CPU provider sells, at its price
        "cpu_bundles": [{"cpu_cores": o.cpu_cores, "memory_mib": o.memory_mib,
                         "price_per_unit": o.price_per_unit} for o in offers if not o.gpu_count],
        # fractions of GPUs, each with its isolation, fault note and self-test, as signed
        "gpu_slices": [entry.model_dump(mode="json") for o in offers
                       for entry in slice_terms(o.body)],
        "gpu_slices_note": next((json.loads(o.body).get("gpu_slices_note") for o in offers
                                 if '"gpu_slices_note":' in o.body), None),
        "gateway": _gateway_terms(offers),
        "bond": {"ref": provider.bond_ref, "lovelace": provider.bond_lovelace,
                 "state": provider.bond_state,
                 # an active bond covers the jobs closing within this long of now
                 "covers_ms": ctx.scripts.covers_before(None, 0)},
        "jobs": counts,
        # counted from the chain index: what its escrows and bond became, not its word
        "record": {**dataclasses.asdict(record), "delivered_percent": record.delivered_percent},
        "uptime": _uptime(online),
        "selftest": json.loads(provider.selftest) if provider.selftest else None,
    }  # fmt: skip


def _gateway_terms(offers: list[Offer]) -> dict[str, Any] | None:
    """Where renters deploy endpoints on the provider and the least each request and token
    costs there, as its signed offer says (None: it runs no gateway)."""
    for offer in offers:
        if '"gateway_url":' in offer.body:
            terms = json.loads(offer.body)
            prices = terms.get("token_prices") or [None, None]
            return {"url": terms["gateway_url"], "request_price": terms.get("request_price"),
                    "input_token_price": prices[0], "output_token_price": prices[1]}  # fmt: skip
    return None


def _offers(session: Session, provider_ids: Sequence[str]) -> dict[str, list[Offer]]:
    found: dict[str, list[Offer]] = {p: [] for p in provider_ids}
    query = select(Offer).where(col(Offer.provider_id).in_(provider_ids), col(Offer.active))
    for offer in session.exec(query.order_by(col(Offer.id))):
        found[offer.provider_id].append(offer)
    return found


def provider_list(session: Session, ctx: Context, after: str | None) -> dict[str, Any]:
    query = select(Provider)
    if after:
        query = query.where(col(Provider.id) > after)
    rows = session.exec(query.order_by(col(Provider.id)).limit(PAGE + 1)).all()
    page = rows[:PAGE]
    ids = [p.id for p in page]
    offers, counts = _offers(session, ids), _counts(session, ids)
    online, records = health.uptime(session, ids, ctx.now_ms), reputation.of(session, ids)
    rows_shown = [_provider_row(p, offers[p.id], counts[p.id], online[p.id], ctx, records[p.id])
                  for p in page]  # fmt: skip
    return {
        "providers": rows_shown,
        "next": page[-1].id if len(rows) > PAGE else None,
    }


def _earnings(session: Session, provider_id: str) -> list[dict[str, int]]:
    """Lovelace earned per day (market clock of the settlement), oldest first."""
    day = col(JobEvent.at_ms) // DAY_MS  # whole days: "/" is a true (numeric) division
    rows = session.exec(
        select(day, *_exact_sum(col(Job.price_per_unit) * col(Job.receipt_units)))
        .join(Job, col(Job.id) == col(JobEvent.job_id))
        .where(col(Job.provider_id) == provider_id, col(JobEvent.to_state) == S.SETTLED)
        .group_by(day).order_by(day)
    ).all()  # fmt: skip
    return [{"day_ms": int(d) * DAY_MS, "lovelace": _joined(high, low)} for d, high, low in rows]


def provider_page(session: Session, ctx: Context, provider_id: str) -> dict[str, Any]:
    provider = session.get(Provider, provider_id)
    if provider is None:
        raise NotFound(f"no provider {provider_id}", "provider_id")
    bonds = session.exec(
        select(Bond).where(Bond.provider_id == provider_id).order_by(col(Bond.created_slot).desc())
        .limit(RECENT)
    ).all()  # fmt: skip
    recent = job_list(session, {"provider": provider_id})
    return {
        "provider": _provider_row(provider, _offers(session, [provider_id])[provider_id],
                                  _counts(session, [provider_id])[provider_id],
                                  health.uptime(session, [provider_id], ctx.now_ms)[provider_id],
                                  ctx, reputation.of(session, [provider_id])[provider_id]),
        "settle_delay_ms": reputation.completion_to_settle_ms(
            session, provider_id, lambda slot: ctx.slot_ms(slot) or 0),
        "bonds": [{"ref": b.ref, "lovelace": b.lovelace, "unbonding_since_ms": b.unbonding_since_ms,
                   "spent_tx": b.spent_tx, "spent_as": b.spent_as,
                   # an unbonding bond covers the jobs closing before a fixed time
                   "covers_before_ms": None if b.unbonding_since_ms is None
                   else ctx.scripts.covers_before(b.unbonding_since_ms, 0)} for b in bonds],
        "earnings": _earnings(session, provider_id),
        "jobs": recent["jobs"][:RECENT * 2],
    }  # fmt: skip


# --- chain: transactions, addresses, blocks ---------------------------------------------------


def tx_page(session: Session, ctx: Context, tx_id: str) -> dict[str, Any]:
    tx = session.get(ChainTx, tx_id)
    if tx is None:
        raise NotFound(
            f"transaction {tx_id} is not in the index: it holds the transactions that touch "
            "the escrow, bond and channel scripts, from when the market began following the chain",
            "tx_id",
        )
    view = json.loads(tx.view)
    refs = [i["ref"] for i in view["inputs"]]
    spent = {
        o.ref: o for o in session.exec(select(ChainTxOut).where(col(ChainTxOut.ref).in_(refs)))
    }
    for item in view["inputs"]:
        out = spent.get(item["ref"])
        item["from"] = (
            {"address": out.address, "lovelace": out.lovelace, "script": out.script,
             "datum": json.loads(out.datum) if out.datum else None}
            if out else None
        )  # fmt: skip
    out_refs = [format_out_ref(out_ref_of(tx_id, i)) for i in range(len(view["outputs"]))]
    outs = session.exec(
        select(ChainTxOut.ref, ChainTxOut.spent_by).where(col(ChainTxOut.ref).in_(out_refs))
    ).all()
    spent_by = dict(outs)
    for output, ref in zip(view["outputs"], out_refs, strict=True):
        output["ref"] = ref
        output["spent_by"] = spent_by.get(ref)
    block = session.get(ChainBlock, tx.slot)
    moves = session.exec(
        select(JobEvent.job_id, JobEvent.to_state)
        .where(JobEvent.tx_id == tx_id).order_by(col(JobEvent.id))
    ).all()  # fmt: skip
    # each job once, at its last move by this transaction (settling when it was submitted,
    # settled once it landed: one settlement, not two)
    last = {job_id: str(state) for job_id, state in moves}
    return {
        "tx": {"id": tx.tx_id, "slot": tx.slot, "height": tx.height,
               "time_ms": ctx.slot_ms(tx.slot), **view},
        "block": _block(block, ctx) if block else None,
        "jobs": sorted(last.items()),
    }  # fmt: skip


def address_page(session: Session, address: str, after: str | None) -> dict[str, Any]:
    """Outputs the index saw at `address`, newest first (cursor `slot.ref`)."""
    query = select(ChainTxOut).where(ChainTxOut.address == address)
    page, more = keyset(session, query, ChainTxOut.slot, ChainTxOut.ref, after)
    providers = session.exec(select(Provider.id).where(Provider.payout_address == address)).all()
    return {
        "address": address,
        "outputs": [
            {"ref": o.ref, "slot": o.slot, "lovelace": o.lovelace, "script": o.script,
             "datum": json.loads(o.datum) if o.datum else None, "spent_by": o.spent_by}
            for o in page
        ],
        "providers": list(providers),
        "next": more,
    }  # fmt: skip


def block_page(session: Session, ctx: Context, height: int) -> dict[str, Any]:
    block = session.exec(select(ChainBlock).where(ChainBlock.height == height)).first()
    if block is None:
        raise NotFound(f"block {height} is not in the index", "height")
    txs = session.exec(
        select(ChainTx.tx_id).where(ChainTx.slot == block.slot).order_by(col(ChainTx.tx_id))
    ).all()
    return {"block": _block(block, ctx), "transactions": list(txs)}


# --- search -----------------------------------------------------------------------------------


def search(session: Session, text: str) -> str | None:
    """The path of what `text` names (a job as `job_ids.resolve` finds it, tx hash, block id
    or height, address, provider id, channel id), or None; a prefix several jobs share is a
    Conflict."""
    q = text.strip()
    if q.isascii() and q.isdigit() and len(q) <= HEIGHT_DIGITS:
        found = session.exec(select(ChainBlock.height).where(ChainBlock.height == int(q))).first()
        if found is not None:  # else it may be a job id's first digits
            return f"/explorer/blocks/{found}"
    if q.startswith(("addr", "stake")):
        return f"/explorer/addresses/{q}"
    key = q.lower()
    # by their keys, first (a provider id and a channel id are both 56 hex digits)
    hits = ((ChainTx.tx_id, "txs"), (Provider.id, "providers"), (Channel.id, "channels"))
    for column, page in hits:
        if session.exec(select(column).where(column == key)).first() is not None:
            return f"/explorer/{page}/{key}"
    try:
        return f"/explorer/jobs/{job_ids.resolve(session, q).id}"
    except NotFound:
        pass
    for column, page, what in ((Provider.id, "providers", "provider"),
                               (Channel.id, "channels", "channel")):  # fmt: skip
        try:  # a prefix, as the CLI prints them
            return f"/explorer/{page}/{full_id(session, column, q, what)}"
        except NotFound:
            pass
    height = session.exec(select(ChainBlock.height).where(ChainBlock.block_id == key)).first()
    if height is not None:
        return f"/explorer/blocks/{height}"
    return None
