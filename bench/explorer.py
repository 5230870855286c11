"""Explorer page latency at the sizes the explorer is designed for: 10,000 jobs (with their
timelines and logs), 1,000 providers (with offers, bonds, self-test summaries and 8 days of
heartbeat history) and 100,000 indexed transactions (with their outputs and blocks), on SQLite
and, where PostgreSQL is installed, on PostgreSQL.

Each page is rendered through the market's own app in process (routing, queries, templates:
everything but the socket), over varied ids and filters; p99 per page in ms, the largest as
`max_page_p99_ms` (target: 200 ms). Prints a table and writes bench/results/explorer.json.
Run: .venv/bin/python -m bench.explorer [--requests N] [--no-postgresql]
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from pycardano import Address, Network, VerificationKeyHash
from sqlalchemy import Engine, func, insert, select

from offchain.chain.time import ChainTime, Era
from offchain.chain.utxo import format_out_ref, out_ref_of
from offchain.market.db import make_engine, upgrade
from offchain.market.explorer import routes
from offchain.market.explorer.queries import Scripts
from offchain.market.models import (
    Bond,
    ChainBlock,
    ChainTx,
    ChainTxOut,
    Job,
    JobEvent,
    JobState,
    LogLine,
    Offer,
    OnlineSpan,
    Provider,
)  # fmt: skip
from offchain.market.services.jobs import now_ms
from offchain.market.settings import MarketSettings
from offchain.protocol.job.offer import SelfTestSummary
from unchained.deploy import NOTICE_MS, REFUND_WINDOW_MS

JOBS, PROVIDERS, TRANSACTIONS = 10_000, 1_000, 100_000
TARGET_MS = 200
RESULTS = Path(__file__).parent / "results" / "explorer.json"
START_MS = 1_700_000_000_000
GPUS = ["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "NVIDIA GeForce RTX 4090",
        "NVIDIA L40S", "NVIDIA RTX A6000"]  # fmt: skip
PATH = [JobState.REQUESTED, JobState.QUOTED, JobState.FUNDED, JobState.ACCEPTED,
        JobState.RUNNING, JobState.COMPLETED, JobState.SETTLING, JobState.SETTLED]  # fmt: skip
CHUNK = 5_000
SCRIPTS = Scripts(0, bytes(range(28)), NOTICE_MS, REFUND_WINDOW_MS)
HOUR_MS = 3_600_000
HISTORY_MS = 8 * 24 * HOUR_MS  # a day more than the longest uptime window
CHECKS = ["engine", "hardening", "memory limit", "pids limit", "duration limit", "disk limit",
          "gpu visible", "cpu benchmark"]  # fmt: skip


def _hex(rng: random.Random, n: int) -> str:
    return rng.randbytes(n).hex()


def _out_ref(rng: random.Random) -> str:
    """Output 0 of a made-up transaction, as the tables write an out-ref."""
    return format_out_ref(out_ref_of(_hex(rng, 32), 0))


def _chunks(engine: Engine, model: Any, rows: Iterator[dict[str, Any]]) -> None:
    batch: list[dict[str, Any]] = []
    with engine.begin() as connection:
        for row in rows:
            batch.append(row)
            if len(batch) == CHUNK:
                connection.execute(insert(model), batch)
                batch = []
        if batch:
            connection.execute(insert(model), batch)


def _address(rng: random.Random) -> str:
    return str(Address(VerificationKeyHash(rng.randbytes(28)), network=Network.TESTNET))


def _spans(rng: random.Random, provider: str, now: int) -> Iterator[dict[str, Any]]:
    """A provider's heartbeat history back from `now`: stretches online of 1-12 h between
    gaps of 5 min to 3 h (about 24 rows each)."""
    end = now - rng.randrange(HOUR_MS)
    while end > now - HISTORY_MS:
        start = end - rng.randrange(HOUR_MS, 12 * HOUR_MS)
        yield {"provider_id": provider, "start_ms": start, "end_ms": end}
        end = start - rng.randrange(HOUR_MS // 12, 3 * HOUR_MS)


def _selftest(rng: random.Random) -> str:
    outcomes = [(name, rng.choice(["pass"] * 8 + ["fail", "skip"])) for name in CHECKS]
    return SelfTestSummary.of(outcomes, START_MS + rng.randrange(10**9)).model_dump_json()


def seed(engine: Engine, rng: random.Random) -> dict[str, list[str]]:
    """Fill the database; returns ids to ask pages for."""
    providers = [_hex(rng, 28) for _ in range(PROVIDERS)]
    payout = {p: _address(rng) for p in providers}
    _chunks(engine, Provider, (
        {"id": p, "vkey": _hex(rng, 32), "payout_address": payout[p],
         "last_heartbeat_ms": START_MS + rng.randrange(10**9), "bond_ref": _out_ref(rng),
         "bond_lovelace": 100_000_000, "bond_state": "active", "selftest": _selftest(rng)}
        for p in providers
    ))  # fmt: skip
    now = now_ms()  # uptime is over the windows ending now, as the pages ask
    _chunks(engine, OnlineSpan, (row for p in providers for row in _spans(rng, p, now)))
    _chunks(engine, Offer, (
        {"provider_id": p, "body": "{}", "signature": "", "key": "", "gpu_model": rng.choice(GPUS),
         "gpu_count": rng.randint(1, 8), "vram_mib": 81_920, "cpu_cores": 32,
         "memory_mib": 262_144, "disk_mib": 1 << 20, "price_per_unit": rng.randint(10_000, 90_000),
         "slots": 1, "created_at_ms": START_MS, "active": True}
        for p in providers for _ in range(2)
    ))  # fmt: skip
    _chunks(engine, Bond, (
        {"ref": _out_ref(rng), "provider_id": p, "lovelace": 100_000_000,
         "created_slot": rng.randrange(10**6)}
        for p in providers
    ))  # fmt: skip
    jobs = [(_hex(rng, 16), rng.choice(providers), rng.randint(1, len(PATH))) for _ in range(JOBS)]
    consumers = [_hex(rng, 28) for _ in range(2_000)]
    spec = json.dumps({"image": "python:3.11", "command": ["python", "train.py"], "env": {},
                       "inputs": [], "resources": {"gpus": 1, "min_vram_mib": 40_000,
                       "cpu_cores": 8, "memory_mib": 65_536, "disk_mib": 10_240},
                       "max_duration_s": 3600, "max_price_lovelace": 500_000_000,
                       "network": False})  # fmt: skip
    _chunks(engine, Job, (
        {"id": job, "consumer_vkey": _hex(rng, 32), "consumer_id": rng.choice(consumers),
         "consumer_address": payout[provider], "spec": spec, "spec_digest": _hex(rng, 32),
         "max_price": 500_000_000, "provider_id": provider, "provider_vkey": _hex(rng, 32),
         "provider_address": payout[provider], "gpu_model": rng.choice(GPUS),
         "price_per_unit": 50_000, "max_units": 3600, "deadline_ms": START_MS + 10**8,
         "settle_window_ms": 3_600_000, "fee_allowance": 2_000_000,
         "lock_lovelace": 50_000 * 3600 + 2_000_000,
         "escrow_ref": _out_ref(rng),
         "receipt_units": 1200 if steps >= 6 else None,
         "receipt_result_hash": _hex(rng, 32) if steps >= 6 else None,
         "receipt_evidence_hash": _hex(rng, 32) if steps >= 6 else None,
         "receipt_signature": _hex(rng, 64) if steps >= 6 else None,
         "state": PATH[steps - 1].value, "created_at_ms": START_MS + i * 1000,
         "updated_at_ms": START_MS + i * 1000 + steps}
        for i, (job, provider, steps) in enumerate(jobs)
    ))  # fmt: skip
    _chunks(engine, JobEvent, (
        {"job_id": job, "at_ms": START_MS + i * 1000 + k * 10_000,
         "from_state": PATH[k - 1].value if k else None, "to_state": PATH[k].value,
         "cause": "chain" if k in (2, 7) else "api", "detail": "", "slot": i * 10 + k,
         "block_height": i * 10 + k, "tx_id": _hex(rng, 32) if k in (2, 7) else None}
        for i, (job, _, steps) in enumerate(jobs) for k in range(steps)
    ))  # fmt: skip
    _chunks(engine, LogLine, (
        {"job_id": job, "seq": s, "at_ms": START_MS, "text": f"epoch {s}: loss {1000 - s}"}
        for job, _, steps in jobs if steps >= 5 for s in range(200)
    ))  # fmt: skip
    txs = [_hex(rng, 32) for _ in range(TRANSACTIONS)]
    busy_address = _address(rng)
    datum = {"type": "EscrowDatum", "consumer": busy_address, "provider": busy_address,
             "provider_vkey": _hex(rng, 32), "price_per_unit": 50_000, "max_units": 3600,
             "deadline": START_MS, "settle_window": 3_600_000, "job_id": _hex(rng, 32),
             "fee_allowance": 2_000_000}  # fmt: skip
    view = json.dumps({
        "inputs": [{"ref": _out_ref(rng), "redeemer": {"type": "Settle", "own_input": 0}}],
        "outputs": [{"address": busy_address, "lovelace": 182_000_000, "script": "escrow",
                     "datum": datum, "tokens": False}] * 3,
        "withdrawals": [], "other_redeemers": [], "fee": 400_000, "valid_from_slot": None,
        "valid_until_slot": None, "signers": [], "valid": True,
    })  # fmt: skip
    per_block = 2
    _chunks(engine, ChainBlock, (
        {"slot": b, "height": b, "block_id": _hex(rng, 32), "tx_count": 5,
         "indexed_txs": per_block}
        for b in range(TRANSACTIONS // per_block)
    ))  # fmt: skip
    _chunks(engine, ChainTx, (
        {"tx_id": tx, "slot": i // per_block, "height": i // per_block, "view": view}
        for i, tx in enumerate(txs)
    ))  # fmt: skip
    addresses = [busy_address] + [payout[p] for p in providers]
    _chunks(engine, ChainTxOut, (
        {"ref": format_out_ref(out_ref_of(tx, o)), "slot": i // per_block, "lovelace": 182_000_000,
         "address": busy_address if o == 0 else rng.choice(addresses),
         "script": "escrow" if o == 0 else None, "datum": json.dumps(datum) if o == 0 else None,
         "spent_by": txs[min(i + 1, len(txs) - 1)] if o == 0 else None}
        for i, tx in enumerate(txs) for o in range(3)
    ))  # fmt: skip
    return {
        "jobs": [j for j, _, _ in jobs],
        "providers": providers,
        "txs": txs,
        "addresses": addresses,
        "consumers": consumers,
    }


def pages(ids: dict[str, list[str]], rng: random.Random) -> dict[str, Callable[[], str]]:
    """Each page, as a function giving one URL to ask for (varied ids and filters)."""

    def pick(kind: str) -> str:
        return rng.choice(ids[kind])

    return {
        "home": lambda: "/explorer",
        "jobs": lambda: "/explorer/jobs",
        "jobs?state": lambda: f"/explorer/jobs?state={rng.choice(PATH).value}",
        "jobs?provider": lambda: f"/explorer/jobs?provider={pick('providers')}",
        "jobs?consumer": lambda: f"/explorer/jobs?consumer={pick('consumers')}",
        "jobs?gpu": lambda: f"/explorer/jobs?gpu={rng.choice(GPUS)}",
        "jobs?after": lambda: f"/explorer/jobs?after={START_MS + rng.randrange(JOBS) * 1000}.z",
        "job": lambda: f"/explorer/jobs/{pick('jobs')}",
        "providers": lambda: "/explorer/providers",
        "providers?after": lambda: f"/explorer/providers?after={pick('providers')}",
        "provider": lambda: f"/explorer/providers/{pick('providers')}",
        "tx": lambda: f"/explorer/txs/{pick('txs')}",
        "address": lambda: f"/explorer/addresses/{pick('addresses')}",
        "address(busy)": lambda: f"/explorer/addresses/{ids['addresses'][0]}",
        "block": lambda: f"/explorer/blocks/{rng.randrange(TRANSACTIONS // 2)}",
        "search": lambda: f"/explorer/search?q={pick('txs')}",
        "api/job": lambda: f"/api/explorer/jobs/{pick('jobs')}",
    }


def p99_us(samples: list[int]) -> int:
    ordered = sorted(samples)
    return ordered[max(0, -(-len(ordered) * 99 // 100) - 1)]


def measure(client: TestClient, page: Callable[[], str], requests: int) -> int:
    for _ in range(5):  # warm the caches a person's second visit finds warm too
        client.get(page())
    taken = []
    for _ in range(requests):
        url = page()
        start = time.perf_counter_ns()
        answer = client.get(url, follow_redirects=False)
        taken.append((time.perf_counter_ns() - start) // 1000)
        assert answer.status_code in (200, 303), (url, answer.status_code, answer.text[:300])
    return p99_us(taken)


def run_on(database: str, url: str, requests: int, folder: Path) -> dict[str, Any]:
    settings = MarketSettings(data_dir=folder / database, database_url=url)
    engine = make_engine(settings)
    upgrade(engine)
    rng = random.Random(12)
    started = time.monotonic_ns()
    ids = seed(engine, rng)
    seeded_s = (time.monotonic_ns() - started) // 1_000_000_000
    with engine.connect() as connection:
        spans = connection.execute(select(func.count()).select_from(OnlineSpan)).scalar_one()
    state = routes.ExplorerState(SCRIPTS, ChainTime(START_MS, (Era(0, 0, None, 1000),)))
    with TestClient(routes.explorer_app(settings, engine, state)) as client:
        results = {name: measure(client, page, requests) for name, page in pages(ids, rng).items()}
    engine.dispose()
    per_page_ms = {name: -(-us // 1000) for name, us in results.items()}
    return {
        "database": database, "seed_s": seeded_s, "online_spans": spans,
        "requests_per_page": requests,
        "page_p99_us": results, "page_p99_ms": per_page_ms,
        "max_page_p99_ms": max(per_page_ms.values()),
    }  # fmt: skip


def _ms(us: int) -> str:
    return f"{us // 1000}.{us % 1000 // 100}"


@contextmanager
def postgresql() -> Iterator[str | None]:
    """A throwaway PostgreSQL (the market tests' cluster), or None where none is installed."""
    from tests.market.postgres import Cluster, server_bin

    bin_dir = server_bin()
    if bin_dir is None:
        yield None
        return
    cluster = Cluster(bin_dir).start()
    try:
        yield cluster.new_database()
    finally:
        cluster.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200, help="per page")
    parser.add_argument("--no-postgresql", action="store_true")
    args = parser.parse_args()
    runs = []
    with tempfile.TemporaryDirectory() as folder:
        runs.append(run_on("sqlite", "", args.requests, Path(folder)))
        if not args.no_postgresql:
            with postgresql() as url:
                if url is not None:
                    runs.append(run_on("postgresql", url, args.requests, Path(folder)))
    names = list(runs[0]["page_p99_ms"])
    print(f"{'page (p99 ms)':<18}" + "".join(f"{r['database']:>12}" for r in runs))
    for name in names:
        print(f"{name:<18}" + "".join(f"{_ms(r['page_p99_us'][name]):>12}" for r in runs))
    worst = max(r["max_page_p99_ms"] for r in runs)
    print(f"max page p99: {worst} ms (target <= {TARGET_MS} ms)")
    result = {
        "sizes": {"jobs": JOBS, "providers": PROVIDERS, "transactions": TRANSACTIONS,
                  "online_spans": runs[0]["online_spans"]},
        "target_ms": TARGET_MS, "runs": runs,
        "page_p99_ms": {n: max(r["page_p99_ms"][n] for r in runs) for n in names},
        "max_page_p99_ms": worst,
    }  # fmt: skip
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
