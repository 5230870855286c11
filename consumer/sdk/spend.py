"""What each job cost its renter, read from the chain as the market's index shows it (the
explorer's transaction pages): the escrow the renter locked (its lovelace, price and fee
allowance, from its datum), the lock transaction's fee, and what came back from the
transaction that spent the escrow. `net_cost = locked + lock_fee - refunded` is the renter's
wallet difference for the job, to the lovelace: from a settle (someone else's transaction,
whose payouts are merged and untagged) `refunded` is the escrow's part of it as the index
splits it (`settled`: the units claimed and the datum); from a refund or cancel, the renter's
output tagged with the escrow's out-ref, or when the renter submitted it itself (its change
comes back untagged) the escrow less that transaction's fee and what it paid anyone else, the
allowance's rest included."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from offchain.chain.utxo import ogmios_ref, split_out_ref
from offchain.protocol.api.market_errors import MarketRefused
from offchain.protocol.ledger.amounts import ada

if TYPE_CHECKING:
    from consumer.sdk.store import JobRecord

Get = Callable[[str], Any]  # a GET of the market's JSON; None when not found
NOT_FOUND = 404


def or_none(get: Callable[[str], Any]) -> Get:
    """`get`, answering None for a page the market does not have (yet): a lock not indexed."""

    def found(path: str) -> Any:
        try:
            return get(path)
        except MarketRefused as exc:
            if exc.details.get("status") == NOT_FOUND:
                return None
            raise

    return found


@dataclasses.dataclass(frozen=True)
class JobCost:
    """One job's money, integer lovelace. `refunded` and `provider_paid` stay 0 while the
    escrow is unspent (`spent_by` None); a job never locked costs nothing."""

    job_id: str
    state: str | None
    escrow: str | None
    price_per_unit: int = 0
    units: int | None = None  # the receipt's, once the market has it
    locked: int = 0
    fee_allowance: int = 0
    lock_fee: int = 0
    provider_paid: int = 0  # units x price
    refunded: int = 0
    spent_by: str | None = None

    @property
    def due(self) -> int | None:
        """units x price: what the receipt earns the provider."""
        return None if self.units is None else self.units * self.price_per_unit

    @property
    def net_cost(self) -> int:
        return self.locked + self.lock_fee - self.refunded

    def as_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "due": self.due, "net_cost": self.net_cost}


def job_cost(
    get: Get, job_id: str, state: str | None, escrow: str | None, units: int | None
) -> JobCost:
    """The job's money as the chain has it; only the ids while its lock is not indexed yet."""
    bare = JobCost(job_id, state, escrow, units=units)
    if escrow is None:
        return bare
    tx_id, index = split_out_ref(escrow)  # no pycardano: `job list` starts without it
    lock = get(f"/api/explorer/txs/{tx_id}")
    if lock is None:
        return bare
    output = lock["tx"]["outputs"][index]
    datum = output["datum"] or {}
    spent_by = output.get("spent_by")
    spend = get(f"/api/explorer/txs/{spent_by}") if spent_by else None
    back = returned(spend["tx"], escrow, output["lovelace"], datum) if spend else {}
    return dataclasses.replace(
        bare, price_per_unit=datum.get("price_per_unit", 0), locked=output["lovelace"],
        fee_allowance=datum.get("fee_allowance", 0), lock_fee=lock["tx"]["fee"],
        provider_paid=back.get("provider", 0), refunded=back.get("consumer", 0),
        spent_by=spent_by,
    )  # fmt: skip


def returned(tx: dict[str, Any], escrow: str, locked: int, datum: dict[str, Any]) -> dict[str, int]:
    """What transaction `tx` (the explorer's view), spending `escrow` of `locked` lovelace,
    gave the escrow's `provider` and its `consumer` (net, to its wallet)."""
    settled = next((row for row in tx.get("settled", []) if row["escrow"] == escrow), None)
    if settled is not None:
        return {"provider": settled["provider_lovelace"], "consumer": settled["consumer_lovelace"]}
    consumer, provider = datum.get("consumer"), datum.get("provider")
    tagged = [o for o in tx["outputs"] if (o["datum"] or {}).get("escrow") == escrow]
    paid = {
        "provider": sum(o["lovelace"] for o in tagged if o["address"] == provider),
        "consumer": sum(o["lovelace"] for o in tagged if o["address"] == consumer),
    }
    if any(o["address"] == consumer and o not in tagged for o in tx["outputs"]):  # its change
        others = sum(o["lovelace"] for o in tx["outputs"] if o["address"] != consumer)
        paid["consumer"] = locked - tx["fee"] - others
    return paid


def job_costs(get: Get, jobs: Iterable[dict[str, Any]]) -> list[JobCost]:
    """`job_cost` of rows with `job_id`, `state`, `escrow` and `units`."""
    return [job_cost(get, job["job_id"], job["state"], job["escrow"], job.get("units"))
            for job in jobs]  # fmt: skip


def cost_lines(cost: JobCost) -> list[str]:
    """What the job cost, for `job status`: lines under its state."""
    if not cost.locked:
        return ["  cost     nothing locked"]
    units = "-" if cost.units is None else f"{cost.units} units x {cost.price_per_unit:,} "
    due = "" if cost.due is None else f"lovelace = {ada(cost.due)}"
    lines = [
        f"  locked   {ada(cost.locked)}",
        f"  cost     {units}{due}",
        f"  fee      allowance {ada(cost.fee_allowance)} (not refunded), lock transaction "
        f"{ada(cost.lock_fee)}",
    ]
    if cost.spent_by:
        lines.append(f"  back     {ada(cost.refunded)} (transaction {cost.spent_by}); net cost "
                     f"{ada(cost.net_cost)}")  # fmt: skip
    return lines


SPEND_COLUMNS = ("job", "state", "paid to provider", "allowance", "lock fee", "refunded",
                 "net cost")  # fmt: skip


def spend_row(cost: JobCost) -> list[str]:
    """One line of `job spend`: the id's first 8 characters and the amounts in ADA."""
    amounts = (cost.provider_paid, cost.fee_allowance, cost.lock_fee, cost.refunded,
               cost.net_cost)  # fmt: skip
    return [cost.job_id[:8], cost.state or "-", *(ada(a) for a in amounts)]


def spend_total(costs: list[JobCost]) -> dict[str, int]:
    """The sums of `job spend`'s columns."""
    return {
        "provider_paid": sum(c.provider_paid for c in costs),
        "fee_allowance": sum(c.fee_allowance for c in costs),
        "lock_fee": sum(c.lock_fee for c in costs),
        "refunded": sum(c.refunded for c in costs),
        "net_cost": sum(c.net_cost for c in costs),
    }


def locked_in_escrows(ogmios_url: str, records: Iterable[JobRecord]) -> int:
    """Lovelace in the escrows of `records` still unspent on chain (the chain's word alone),
    from one UTxO query to the chain's Ogmios (none without an escrow)."""
    from offchain.chain.ogmios import utxo_lovelace

    refs = [ogmios_ref(r.escrow) for r in records if r.escrow]
    return utxo_lovelace(ogmios_url, {"outputReferences": refs}) if refs else 0


def in_channels(ogmios_url: str, address: str, channel_ids: Iterable[str]) -> int:
    """Lovelace in the channels `channel_ids` (hex) still unspent at their script address
    `address` (bech32), the chain's word alone: one UTxO query. A channel is known by its
    datum, whose `terms` field is the channel id (a CBOR byte string of 28 bytes)."""
    from offchain.chain.ogmios import request_sync

    wanted = [f"581c{channel_id}" for channel_id in channel_ids]
    if not wanted:
        return 0
    utxos = request_sync(ogmios_url, "queryLedgerState/utxo", {"addresses": [address]})
    return sum(int(utxo["value"]["ada"]["lovelace"]) for utxo in utxos
               if any(tag in utxo.get("datum", "") for tag in wanted))  # fmt: skip
