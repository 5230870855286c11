"""Devnet throughput and latency, measured over the real socket.

- payments/s: pre-signed payments sent over open connections, counted when included in a block
- script spends/s: the same for spends of a validator that decodes its datum and checks a
  signature (tests.devnet.handwritten.SIGNED_BY_DATUM_OWNER)
- p50/p99 latency of queryLedgerState/utxo and evaluateTransaction on an open connection
- p50/p99 latency of the same utxo query on a connection whose nextBlock is parked at the tip
  (each mini-protocol has its own queue, so the query must not wait for the next block)

Prints a table and writes bench/results/devnet.json. Run: .venv/bin/python -m bench.devnet
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

from cbor2 import CBORTag
from pycardano import (
    Address,
    ExecutionUnits,
    Network,
    PaymentSigningKey,
    PlutusData,
    Redeemer,
    RedeemerTag,
    Transaction,
    TransactionBody,
    TransactionInput,
    TransactionOutput,
    TransactionWitnessSet,
    VerificationKeyWitness,
    plutus_script_hash,
)
from pycardano.plutus import CostModels, RawPlutusData
from pycardano.utils import script_data_hash
from websockets.asyncio.client import connect

from devnet.genesis import ADA, wallet_address
from devnet.process import DevnetProcess
from offchain.chain.follower import RollForward, follow, tip_point
from offchain.chain.ogmios import Ogmios, request
from offchain.chain.submit import submit_and_wait, wait_for_confirmations
from tests.devnet.handwritten import SIGNED_BY_DATUM_OWNER, compile_uplc

RESULTS = Path(__file__).parent / "results" / "devnet.json"
FAN_OUT = 150  # outputs per funding transaction (fits the 16 KiB transaction limit)
FEE = 250_000  # above the minimum for these small transactions; the devnet checks it
FAN_OUT_FEE = 1_000_000  # a full 16 KiB transaction needs about 0.88 ADA


def sign(body: TransactionBody, key: PaymentSigningKey, **witnesses: object) -> Transaction:
    witness = VerificationKeyWitness(key.to_verification_key(), key.sign(body.hash()))
    return Transaction(body, TransactionWitnessSet(vkey_witnesses=[witness], **witnesses))


async def fan_out(
    devnet: DevnetProcess, owner: Address, count: int, each: int, datum=None
) -> list[TransactionInput]:
    """`count` UTxOs of `each` lovelace at `owner`, made from the faucet's money."""
    funder_key = PaymentSigningKey.generate()
    funder = wallet_address(funder_key)
    batches = -(-count // FAN_OUT)
    since = await tip_point(devnet.url)
    available = batches * (FAN_OUT * each + FAN_OUT_FEE) + 10 * ADA
    funding = await request(
        devnet.url, "devnet/fund", {"address": str(funder), "lovelace": available}
    )
    await wait_for_confirmations(devnet.url, funding["transaction"]["id"], since)
    source = TransactionInput.from_primitive([bytes.fromhex(funding["transaction"]["id"]), 0])
    made: list[TransactionInput] = []
    for _ in range(batches):
        n = min(FAN_OUT, count - len(made))
        outputs = [TransactionOutput(owner, each, datum=datum) for _ in range(n)]
        available -= n * each + FAN_OUT_FEE
        outputs.append(TransactionOutput(funder, available))
        tx = sign(TransactionBody(inputs=[source], outputs=outputs, fee=FAN_OUT_FEE), funder_key)
        await submit_and_wait(devnet.url, tx)
        made += [TransactionInput(tx.id, i) for i in range(n)]
        source = TransactionInput(tx.id, n)
    return made


async def throughput(url: str, txs: list[Transaction], connections: int = 8) -> float:
    """Transactions per second from the first send until the last one is in a block."""
    pending = {str(tx.id) for tx in txs}
    since = await tip_point(url)
    start = time.perf_counter()

    async def sender(chunk: list[Transaction]) -> None:
        async with Ogmios(url) as ogmios:
            for tx in chunk:
                await ogmios.request(
                    "submitTransaction", {"transaction": {"cbor": tx.to_cbor().hex()}}
                )

    async def watcher() -> float:
        async for event in follow(url, [since]):
            if isinstance(event, RollForward):
                pending.difference_update(t["id"] for t in event.block["transactions"])
                if not pending:
                    return time.perf_counter()
        raise AssertionError("unreachable")

    watch = asyncio.ensure_future(watcher())
    await asyncio.gather(*(sender(txs[i::connections]) for i in range(connections)))
    end = await asyncio.wait_for(watch, 300)
    return len(txs) / (end - start)


def payments(
    inputs: list[TransactionInput], key: PaymentSigningKey, each: int
) -> list[Transaction]:
    owner = wallet_address(key)
    receiver = wallet_address(PaymentSigningKey.generate())
    return [
        sign(
            TransactionBody(
                inputs=[i],
                outputs=[
                    TransactionOutput(receiver, 2 * ADA),
                    TransactionOutput(owner, each - 2 * ADA - FEE),
                ],
                fee=FEE,
            ),
            key,
        )
        for i in inputs
    ]


def script_spend(
    locked: TransactionInput,
    collateral: TransactionInput,
    key: PaymentSigningKey,
    script,
    each: int,
    units: ExecutionUnits,
    cost_models: dict,
) -> Transaction:
    owner = wallet_address(key)
    redeemer = Redeemer(PlutusData(), units)
    redeemer.tag = RedeemerTag.SPEND
    redeemer.index = 0
    body = TransactionBody(
        inputs=[locked],
        outputs=[TransactionOutput(owner, each - 2 * FEE)],
        fee=2 * FEE,
        collateral=[collateral],
        required_signers=[key.to_verification_key().hash()],
        script_data_hash=script_data_hash([redeemer], [], cost_models),
    )
    return sign(body, key, plutus_v3_script=[script], redeemer=[redeemer])


async def latencies(url: str, method: str, requests: list[dict]) -> tuple[float, float]:
    """Median and 99th percentile milliseconds of one request after another, one connection."""
    timings = []
    async with Ogmios(url) as ogmios:
        for params in requests:
            start = time.perf_counter()
            await ogmios.request(method, params)
            timings.append((time.perf_counter() - start) * 1000)
    return median_and_p99(timings)


async def latencies_beside_parked_next_block(
    url: str, method: str, requests: list[dict]
) -> tuple[float, float]:
    """`latencies` on a connection that also follows the chain: its nextBlock waits at the
    tip, and is sent again whenever a block answers it."""
    next_block = json.dumps({"jsonrpc": "2.0", "method": "nextBlock", "id": "next"})
    timings = []
    async with connect(url, max_size=64 << 20) as ws:
        tip = await request(url, "queryNetwork/tip")
        await ws.send(
            json.dumps(
                {
                    "jsonrpc": "2.0",
                    "method": "findIntersection",
                    "id": "find",
                    "params": {"points": [tip]},
                }
            )
        )
        await ws.send(next_block)  # the roll backward to the intersection, at once
        for _ in ("find", "next"):
            await ws.recv()
        await ws.send(next_block)  # parked at the tip
        for n, params in enumerate(requests):
            start = time.perf_counter()
            await ws.send(
                json.dumps({"jsonrpc": "2.0", "method": method, "params": params, "id": n})
            )
            while json.loads(await ws.recv())["id"] == "next":
                await ws.send(next_block)  # a block came: park another
            timings.append((time.perf_counter() - start) * 1000)
    return median_and_p99(timings)


def median_and_p99(timings: list[float]) -> tuple[float, float]:
    return statistics.median(timings), statistics.quantiles(timings, n=100)[98]


async def run(count: int, script_count: int, samples: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        devnet = DevnetProcess(Path(tmp) / "devnet", slot_length_ms=200).start()
        try:
            return await measure(devnet, count, script_count, samples)
        finally:
            devnet.stop()


async def measure(devnet: DevnetProcess, count: int, script_count: int, samples: int) -> dict:
    url = devnet.url
    key = PaymentSigningKey.generate()
    owner = wallet_address(key)
    each = 10 * ADA
    pay_rate = await throughput(url, payments(await fan_out(devnet, owner, count, each), key, each))

    script = compile_uplc(SIGNED_BY_DATUM_OWNER)
    script_address = Address(plutus_script_hash(script), network=Network.TESTNET)
    datum = RawPlutusData(CBORTag(121, [key.to_verification_key().hash().payload]))
    locked = await fan_out(devnet, script_address, script_count, each, datum=datum)
    collateral = (await fan_out(devnet, owner, 1, each))[0]
    cost_models = _cost_models(devnet)
    template = script_spend(
        locked[0],
        collateral,
        key,
        script,
        each,
        ExecutionUnits(14_000_000, 10_000_000_000),
        cost_models,
    )
    evaluation = await request(
        url, "evaluateTransaction", {"transaction": {"cbor": template.to_cbor().hex()}}
    )
    budget = evaluation[0]["budget"]
    units = ExecutionUnits(budget["memory"], budget["cpu"])
    spends = [script_spend(i, collateral, key, script, each, units, cost_models) for i in locked]
    script_rate = await throughput(url, spends)

    # A wallet-sized answer (3 UTxOs) out of a ledger holding everything made above.
    wallet = wallet_address(PaymentSigningKey.generate())
    await fan_out(devnet, wallet, 3, each)
    ledger_size = len(await request(url, "queryLedgerState/utxo"))
    wallet_query = [{"addresses": [str(wallet)]}] * samples
    utxo_p50, utxo_p99 = await latencies(url, "queryLedgerState/utxo", wallet_query)
    parked_p50, parked_p99 = await latencies_beside_parked_next_block(
        url, "queryLedgerState/utxo", wallet_query
    )
    # Distinct transactions (other outputs), so no answer comes from the evaluation cache.
    fresh = (await fan_out(devnet, script_address, 1, each, datum=datum))[0]
    probes = [
        script_spend(fresh, collateral, key, script, each - i, units, cost_models)
        for i in range(samples)
    ]
    eval_p50, eval_p99 = await latencies(
        url, "evaluateTransaction", [{"transaction": {"cbor": p.to_cbor().hex()}} for p in probes]
    )
    return {
        "payments": count,
        "payments_per_s": round(pay_rate, 1),
        "script_spends": script_count,
        "script_spends_per_s": round(script_rate, 1),
        "script_budget": {"memory": units.mem, "cpu": units.steps},
        "utxo_set_size": ledger_size,
        "utxo_query_p50_ms": round(utxo_p50, 2),
        "utxo_query_p99_ms": round(utxo_p99, 2),
        "utxo_query_beside_parked_next_block_p50_ms": round(parked_p50, 2),
        "utxo_query_beside_parked_next_block_p99_ms": round(parked_p99, 2),
        "evaluate_p50_ms": round(eval_p50, 2),
        "evaluate_p99_ms": round(eval_p99, 2),
        "slot_length_ms": devnet.slot_length_ms,
    }


def _cost_models(devnet: DevnetProcess) -> CostModels:
    return CostModels({2: devnet.context().protocol_param.cost_models["PlutusV3"]})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--payments", type=int, default=1500)
    parser.add_argument("--script-spends", type=int, default=300)
    parser.add_argument("--samples", type=int, default=300)
    args = parser.parse_args()
    results = asyncio.run(run(args.payments, args.script_spends, args.samples))
    width = max(len(k) for k in results)
    for name, value in results.items():
        print(f"{name:<{width}}  {value}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"written to {RESULTS}")


if __name__ == "__main__":
    main()
