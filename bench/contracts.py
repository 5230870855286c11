"""Contract costs, measured on the devnet with the real builders and its evaluateTransaction.

- script sizes (bytes a reference script weighs);
- memory, cpu, fee and size of every action (lock, settle one, refund, cancel, bond create /
  top-up / begin-unbond / withdraw, slash with its refund);
- the largest batch settle within mainnet limits (14M memory, 10B cpu, 16,384 bytes): every
  escrow with its own consumer, one provider whose one claim covers the batch, both payouts;
  and memory per escrow there; and the same with a receipt per job (each its own group, one
  signature check each: what a batch of receipts alone costs);
- every party (consumers, provider, settler) with a payment and a stake credential, as real
  wallets have: a full address weighs 57 bytes in each payout and datum, an enterprise one 29;
- the batch's memory fitted as a + b n + c n^2 over several batch sizes (issue 21: a batch
  should be linear in n), and the escrows one mainnet block holds (90,112 bytes, 62M memory,
  20G cpu per block) filled with the measured batches, with the limit that binds, and per
  minute at one block per 20 s;
- the settle cost per job: a job's share of its batch's fee, settled alone (n = 1, what the
  market's default fee allowance covers: a job may be the only one in its batch) and in the
  largest batch the market's batcher makes (`settle_batch_max`, the batch measured above).

Prints a table and writes bench/results/contracts.json, and `settle_cost_per_job` into
bench/results/consumer.json too (the consumer's view of what settling a job costs).
Run: .venv/bin/python -m bench.contracts
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import tempfile
from collections.abc import Awaitable, Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

from ogmios.errors import ResponseError
from pycardano import (
    PaymentSigningKey,
    ProtocolParameters,
    Transaction,
    TransactionOutput,
    UTxO,
)
from pycardano.exception import PyCardanoException

from devnet.genesis import ADA
from devnet.process import DevnetProcess
from offchain.chain.ogmios import OgmiosError, request
from offchain.protocol.ledger.claim import Claim
from offchain.protocol.ledger.payloads import acceptance_payload, sign
from offchain.protocol.tx import batch as batches
from offchain.protocol.tx import bond as bonds
from offchain.protocol.tx import escrow as escrows
from offchain.protocol.tx.deployment import Deployment, deploy
from offchain.protocol.tx.txbuild import (
    SIZE_MARGIN,
    BuildError,
    Clock,
    Wallet,
    build,
    new_builder,
    sign_tx,
)
from tests.protocol.onchain import confirm, fund, output, staked, to_settle, travel_to

RESULTS = Path(__file__).parent / "results" / "contracts.json"
CONSUMER_RESULTS = RESULTS.with_name("consumer.json")
BLOCKS_PER_MINUTE = 3  # one block per 20 s on average
PRICE, MAX_UNITS, UNITS, ALLOWANCE = 2_000, 3_600, 1_000, 2 * ADA
LOCKED = PRICE * MAX_UNITS + ALLOWANCE + 3 * ADA
NOTICE_MS, SLASH_SHARE_BPS, REFUND_WINDOW_MS = 30_000, 2_500, 10_000
BOND = 400 * ADA
HASH = bytes(32)  # a receipt's result and evidence hashes


async def deployed(devnet: DevnetProcess) -> Deployment:
    """The validators deployed on `devnet` with the benches' terms (bench/market.py's too)."""
    deployer = await wallet(devnet, 10_000 * ADA)
    (tx,), deployment = deploy(
        devnet.context(), deployer.address, 0, NOTICE_MS, SLASH_SHARE_BPS, REFUND_WINDOW_MS
    )
    await confirm(devnet, deployer.sign(tx))
    return deployment


async def cost(devnet: DevnetProcess, tx: Transaction) -> dict[str, Any]:
    """Execution units per script run (as evaluateTransaction reports them), fee and size."""
    runs = await request(
        devnet.url, "evaluateTransaction", {"transaction": {"cbor": tx.to_cbor().hex()}}
    )
    return {
        "memory": sum(r["budget"]["memory"] for r in runs),
        "cpu": sum(r["budget"]["cpu"] for r in runs),
        "fee_lovelace": tx.transaction_body.fee,
        "tx_bytes": len(tx.to_cbor()),
        "runs": {
            f"{r['validator']['purpose']}#{r['validator']['index']}": r["budget"] for r in runs
        },
    }


async def wallet(devnet: DevnetProcess, lovelace: int = 10_000 * ADA) -> Wallet:
    """A fresh staked wallet holding `lovelace` from the faucet."""
    made = staked(PaymentSigningKey.generate())
    await fund(devnet, made.address, lovelace)
    return made


async def lock_many(
    devnet: DevnetProcess, deployment: Deployment, funder: Wallet, provider: Wallet, count: int
) -> list[UTxO]:
    """`count` escrows, each for its own consumer, locked in as few transactions as fit."""
    made: list[UTxO] = []
    while len(made) < count:
        context = devnet.context()
        deadline = Clock.now(context).tip_ms + 600_000
        builder = new_builder(context)
        builder.add_input_address(funder.address)
        for _ in range(min(40, count - len(made))):  # full addresses: 40 datums fit
            consumer = staked(PaymentSigningKey.generate())
            datum = escrows.new_escrow(
                consumer.address, provider.address, provider.vkey, PRICE, MAX_UNITS, deadline,
                60_000, bytes(32), ALLOWANCE,
            )  # fmt: skip
            builder.add_output(TransactionOutput(deployment.escrow_address(), LOCKED, datum=datum))
        tx = await confirm(devnet, funder.sign(build(builder, funder.address)))
        made += [output(tx, i) for i in range(len(tx.transaction_body.outputs) - 1)]
    return made


async def batch_cost(
    devnet: DevnetProcess,
    deployment: Deployment,
    provider: Wallet,
    market: Wallet,
    batch: list[UTxO],
    receipts: bool = False,
) -> dict[str, Any]:
    """The cost of settling all of `batch` in one transaction, by one claim of its provider
    (or with `receipts` by each job's own receipt), or why it cannot be built."""
    context = devnet.context()
    try:
        if receipts:
            signed = [to_settle(deployment, provider.key, e, UNITS, HASH, HASH) for e in batch]
            settle = batches.settle(context, deployment, signed, market.address)
        else:
            units = {e.input: UNITS for e in batch}
            claim = Claim.sign(provider.key, deployment.network_id, deployment.settle_hash, units)
            claims = [(batch, claim)]
            settle = batches.settle(context, deployment, [], market.address, claims=claims)
        tx = market.sign(settle)
        return await cost(devnet, tx)
    except (BuildError, OgmiosError, ResponseError, PyCardanoException) as exc:  # over a limit
        return {"error": str(exc).splitlines()[0][:200]}


@dataclasses.dataclass(frozen=True)
class Limits:
    """A transaction's and a block's limits, as the chain's protocol parameters give them (the
    devnet's default profile: mainnet's); a batch keeps `SIZE_MARGIN` bytes under the size."""

    tx: dict[str, int]
    block: dict[str, int]

    @classmethod
    def of(cls, params: ProtocolParameters) -> Limits:
        return cls(
            {"memory": params.max_tx_ex_mem, "cpu": params.max_tx_ex_steps,
             "tx_bytes": params.max_tx_size - SIZE_MARGIN},
            {"memory": params.max_block_ex_mem, "cpu": params.max_block_ex_steps,
             "tx_bytes": params.max_block_size},
        )  # fmt: skip

    def overflow(self, measured: dict[str, Any]) -> str | None:
        """The limit a batch goes over (None if it fits); builders declare 2% over
        evaluation."""
        if "error" in measured:
            return str(measured["error"])
        declared = {"memory": 1.02, "cpu": 1.02, "tx_bytes": 1}
        over = [name for name, cap in self.tx.items() if measured[name] * declared[name] > cap]
        return ", ".join(over) or None


Measure = Callable[[int], Awaitable[dict[str, Any]]]  # the cost of a batch of n, or its error


async def largest_batch(
    measure: Measure, limit: int, limits: Limits
) -> tuple[int, dict[str, Any], str]:
    """Binary search for the largest batch (of at most `limit`) that fits every limit; also
    what stops one more."""
    low, best = 1, await measure(1)
    assert limits.overflow(best) is None, "a batch of one must fit"
    high = limit + 1  # first size known not to fit (or past the search)
    stop = f"more than {limit} not tried"
    while high - low > 1:
        middle = (low + high) // 2
        measured = await measure(middle)
        reason = limits.overflow(measured)
        print(f"  batch of {middle}: {reason or 'fits'}")
        if reason is None:
            low, best = middle, measured
        else:
            high, stop = middle, reason
    return low, best, stop


async def profile(measure: Measure, largest: int, limits: Limits) -> dict[int, dict[str, Any]]:
    """The cost of batches of several sizes up to the largest, for the fit and the block."""
    sizes = sorted({1, 2, largest // 4, largest // 2, 3 * largest // 4, largest} - {0})
    costs = {n: await measure(n) for n in sizes}
    return {n: measured for n, measured in costs.items() if limits.overflow(measured) is None}


def fit_memory(costs: dict[int, dict[str, Any]]) -> dict[str, int]:
    """Least squares memory = a + b n + c n^2 over the measured sizes, solved exactly (with
    fractions) and rounded: c is the quadratic term a batch should not have."""
    points = [(Fraction(n), Fraction(m["memory"])) for n, m in costs.items()]
    power = [sum(n**k for n, _ in points) for k in range(5)]
    moment = [sum(n**k * m for n, m in points) for k in range(3)]
    system = [[power[i + j] for j in range(3)] + [moment[i]] for i in range(3)]
    for column in range(3):  # Gauss-Jordan on the 3 x 3 normal equations
        pivot = next(r for r in range(column, 3) if system[r][column] != 0)
        system[column], system[pivot] = system[pivot], system[column]
        system[column] = [v / system[column][column] for v in system[column]]
        for r in range(3):
            if r != column:
                system[r] = [
                    v - system[r][column] * p
                    for v, p in zip(system[r], system[column], strict=True)
                ]
    a, b, c = (round(system[i][3]) for i in range(3))
    return {"constant": a, "per_escrow": b, "per_escrow_squared": c}


def per_block(costs: dict[int, dict[str, Any]], limits: Limits) -> dict[str, Any]:
    """The most escrows one mainnet block holds, filled with copies of one measured batch size
    (the best size), and the block limit that binds there."""
    best: dict[str, Any] = {"escrows": 0}
    for n, measured in costs.items():
        room = {limit: cap // measured[limit] for limit, cap in limits.block.items()}
        batches = min(room.values())
        if batches * n > best["escrows"]:
            binding = min(room, key=lambda limit: room[limit])
            best = {"escrows": batches * n, "batch": n, "batches": batches, "binds": binding}
    best["per_minute"] = best["escrows"] * BLOCKS_PER_MINUTE
    return best


async def actions(devnet: DevnetProcess, deployment: Deployment) -> dict[str, dict[str, Any]]:
    """Every action once, built by the protocol's builders."""
    consumer, provider, market = [await wallet(devnet, 10_000 * ADA) for _ in range(3)]
    measured: dict[str, dict[str, Any]] = {}

    async def run(name: str, tx: Transaction) -> Transaction:
        measured[name] = await cost(devnet, tx)
        return await confirm(devnet, tx)

    async def lock() -> UTxO:
        context = devnet.context()
        datum = escrows.new_escrow(
            consumer.address, provider.address, provider.vkey, PRICE, MAX_UNITS,
            Clock.now(context).tip_ms + 30_000, 10_000, bytes(32), ALLOWANCE,
        )  # fmt: skip
        locking = escrows.lock(context, deployment, consumer.address, datum, LOCKED)
        tx = await run("lock", consumer.sign(locking))
        return output(tx, escrows.ESCROW_OUTPUT)

    def context():
        return devnet.context()

    escrow = await lock()
    receipt = to_settle(deployment, provider.key, escrow, UNITS, bytes(32), bytes(32))
    await run(
        "settle", market.sign(batches.settle(context(), deployment, [receipt], market.address))
    )
    escrow = await lock()
    cancel = escrows.cancel(context(), deployment, escrow, consumer.address)
    await run("cancel", sign_tx(cancel, consumer.key, provider.key))
    refunded, slashed = await lock(), await lock()
    created = bonds.create(context(), deployment, provider.address, provider.vkey, BOND)
    tx = await run("bond_create", provider.sign(created))
    bond = output(tx, bonds.BOND_OUTPUT)
    close = escrows.escrow_datum(deployment, slashed).close
    await travel_to(devnet, close + 1)  # in the refund window: the consumer slashes
    job = escrows.escrow_datum(deployment, slashed).job_id
    accepted = acceptance_payload(
        0, deployment.escrow_hash, slashed.input, job, deployment.bond_hash
    )
    signature = sign(provider.key, accepted)
    slash = consumer.sign(
        bonds.slash(context(), deployment, slashed, bond, signature, consumer.address)
    )
    bond = output(await run("slash", slash), bonds.SLASHED_BOND_OUTPUT)
    await travel_to(devnet, close + REFUND_WINDOW_MS + 1)  # after it anyone refunds
    await run(
        "refund", market.sign(escrows.refund(context(), deployment, refunded, market.address))
    )
    topped = bonds.top_up(context(), deployment, bond, provider.address, 10 * ADA)
    tx = await run("bond_top_up", provider.sign(topped))
    bond = output(tx, bonds.BOND_OUTPUT)
    unbond = bonds.begin_unbond(context(), deployment, bond, provider.address)
    tx = await run("bond_begin_unbond", provider.sign(unbond))
    bond = output(tx, bonds.BOND_OUTPUT)
    since = bonds.bond_datum(deployment, bond).unbonding_since.value
    await travel_to(devnet, since + NOTICE_MS)
    withdraw = bonds.withdraw(context(), deployment, bond, provider.address)
    await run("bond_withdraw", provider.sign(withdraw))
    return measured


async def measure(batch_limit: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        devnet = DevnetProcess(Path(tmp) / "data").start()
        try:
            deployment = await deployed(devnet)
            limits = Limits.of(devnet.context().protocol_param)
            measured = await actions(devnet, deployment)
            provider, market = [await wallet(devnet, 100_000 * ADA) for _ in range(2)]
            pool = await lock_many(devnet, deployment, market, provider, batch_limit + 1)

            def settling(receipts: bool) -> Measure:
                return lambda n: batch_cost(
                    devnet, deployment, provider, market, pool[:n], receipts
                )

            size, batch, stop = await largest_batch(settling(False), batch_limit, limits)
            costs = await profile(settling(False), size, limits)
            by_receipts = await largest_batch(settling(True), batch_limit, limits)
        finally:
            devnet.stop()
    settle = measured["settle"]
    return {
        "script_bytes": {
            "escrow": len(deployment.escrow_script),
            "bond": len(deployment.bond_script),
            "settle": len(deployment.settle_script),
        },
        "settle_memory": settle["memory"],
        "settle_cpu": settle["cpu"],
        "settle_fee_lovelace": settle["fee_lovelace"],
        "max_batch_settle": size,
        "batch_memory_per_escrow": batch["memory"] // size,
        "batch_stopped_by": stop,
        "settle_cost_per_job": settle["fee_lovelace"],
        "settle_cost_per_job_by_batch": {
            "1": settle["fee_lovelace"],
            str(size): -(-batch["fee_lovelace"] // size),
        },
        "settle_fee_per_escrow_lovelace": -(-batch["fee_lovelace"] // size),
        "addresses": "payment + stake credential for every party",
        "batch_memory_fit": fit_memory(costs),
        "escrows_per_block": per_block(costs, limits),
        "receipts_batch": {  # each job its own receipt (a group of one): no batch claim
            "max_batch_settle": by_receipts[0],
            "memory_per_escrow": by_receipts[1]["memory"] // by_receipts[0],
            "fee_per_escrow_lovelace": -(-by_receipts[1]["fee_lovelace"] // by_receipts[0]),
            "stopped_by": by_receipts[2],
        },
        "batch_by_size": {
            str(n): {k: m[k] for k in ("memory", "cpu", "fee_lovelace", "tx_bytes")}
            for n, m in costs.items()
        },
        "batch": batch,
        "actions": measured,
        "limits": {**limits.tx, "size_margin_bytes": SIZE_MARGIN},
        "block_limits": limits.block,
    }


def cost_rows(rows: dict[str, dict[str, Any]], script_bytes: dict[str, int]) -> list[str]:
    """Each measured transaction (`cost`'s) as a line of a table under its header, then the
    scripts' sizes."""
    lines = [f"{'action':<20}{'memory':>12}{'cpu':>16}{'fee (lovelace)':>16}{'bytes':>8}"]
    for name, row in rows.items():
        lines.append(
            f"{name:<20}{row['memory']:>12,}{row['cpu']:>16,}{row['fee_lovelace']:>16,}"
            f"{row['tx_bytes']:>8,}"
        )
    sizes = ", ".join(f"{k} {v:,} B" for k, v in script_bytes.items())
    return [*lines, f"scripts: {sizes}"]


def table(results: dict[str, Any]) -> str:
    lines = cost_rows(
        {**results["actions"], f"settle x{results['max_batch_settle']}": results["batch"]},
        results["script_bytes"],
    )
    lines += [
        f"largest batch settle: {results['max_batch_settle']} escrows, "
        f"{results['batch_memory_per_escrow']:,} memory per escrow; "
        f"{results['max_batch_settle'] + 1} goes over: {results['batch_stopped_by']}",
        "settle cost per job (lovelace, by batch size): "
        + ", ".join(f"{n}: {v:,}" for n, v in results["settle_cost_per_job_by_batch"].items()),
        "batch memory fit: {constant:,} + {per_escrow:,} n + {per_escrow_squared:,} n^2".format(
            **results["batch_memory_fit"]
        ),
        "mainnet block: {escrows:,} escrows ({batches} batches of {batch}), bound by {binds}; "
        "{per_minute:,} escrows a minute".format(**results["escrows_per_block"]),
        "with a receipt per job instead of one claim: {max_batch_settle} escrows per "
        "transaction, {memory_per_escrow:,} memory and {fee_per_escrow_lovelace:,} lovelace "
        "each; stopped by {stopped_by}".format(**results["receipts_batch"]),
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-limit", type=int, default=120, help="largest batch to try")
    args = parser.parse_args()
    logging.getLogger("PyCardano").setLevel(logging.CRITICAL)  # failed builds dump their state
    results = asyncio.run(measure(args.batch_limit))
    print(table(results))
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    consumer = json.loads(CONSUMER_RESULTS.read_text()) if CONSUMER_RESULTS.exists() else {}
    consumer["settle_cost_per_job"] = results["settle_cost_per_job"]
    CONSUMER_RESULTS.write_text(json.dumps(consumer, indent=2) + "\n")
    print(f"wrote {RESULTS} and settle_cost_per_job into {CONSUMER_RESULTS}")


if __name__ == "__main__":
    main()
