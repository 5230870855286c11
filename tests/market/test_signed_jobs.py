"""The signed job request's hot path (bench/market.py measures it): its nonce, job and events
are one write transaction, so a replay changes nothing and a refused request still spends its
nonce; stale nonces go in the scheduled work; `serve --workers N` shares one nonce table."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
from sqlalchemy import func
from sqlmodel import Session, select

from offchain.market.db import make_engine, upgrade
from offchain.market.models import Nonce
from offchain.market.services.jobs import now_ms
from offchain.market.services.nonces import DatabaseNonces
from offchain.market.services.scheduler import forget_nonces
from tests.market import processes
from tests.market.client import Party
from tests.market.test_bad_input import refused, snapshot
from tests.market.test_lifecycle import job_request, offer_terms


def nonces_of(settings, signer: str) -> int:
    with Session(make_engine(settings)) as session:
        query = select(func.count()).select_from(Nonce).where(Nonce.signer == signer)
        return session.exec(query).one()


async def test_a_replayed_job_request_changes_nothing(http, settings):
    provider, consumer = (Party.new(http, settings.identity) for _ in range(2))
    await provider.send("POST", "/offers", offer_terms(provider))
    body = json.dumps(job_request(consumer)).encode()
    headers = consumer.headers("POST", "/jobs", body) | {"content-type": "application/json"}
    first = await http.post("/jobs", content=body, headers=headers)
    assert first.status_code == 201, first.text
    before = snapshot(settings)
    assert before["Job"] == 1 and before["JobEvent"] == 2  # requested, then quoted

    refused(await http.post("/jobs", content=body, headers=headers), 409, "nonce")
    assert snapshot(settings) == before
    assert nonces_of(settings, consumer.wallet.key_hash.payload.hex()) == 1


async def test_a_request_no_offer_takes_spends_its_nonce_and_stores_no_job(http, settings):
    consumer = Party.new(http, settings.identity)
    body = json.dumps(job_request(consumer, max_price_lovelace=1)).encode()
    headers = consumer.headers("POST", "/jobs", body) | {"content-type": "application/json"}
    refused(await http.post("/jobs", content=body, headers=headers), 409, "spec")
    assert snapshot(settings)["Job"] == 0
    refused(await http.post("/jobs", content=body, headers=headers), 409, "nonce")
    assert nonces_of(settings, consumer.wallet.key_hash.payload.hex()) == 1


def test_the_scheduled_work_forgets_stale_nonces_only(settings):
    engine = make_engine(settings)
    upgrade(engine)
    store, now = DatabaseNonces(engine), now_ms()
    assert store.claim("a", "stale-nonce", keep_until_ms=now - 1, now_ms=now - 2)
    assert store.claim("a", "fresh-nonce", keep_until_ms=now + 60_000, now_ms=now - 2)
    forget_nonces(engine)
    with Session(engine) as session:
        assert [row.nonce for row in session.exec(select(Nonce))] == ["fresh-nonce"]
    engine.dispose()


def worker_pids(parent: int) -> list[int]:
    """The uvicorn worker processes `serve --workers N` started (Linux: /proc)."""
    children = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
    return [int(pid) for pid in children]


async def test_serve_with_two_workers_shares_one_nonce_table(settings, tmp_path, monkeypatch):
    # three interpreters import the app (the supervisor, then each spawned worker)
    monkeypatch.setattr(processes, "START_TIMEOUT_S", 3 * processes.START_TIMEOUT_S)
    market = processes.MarketProcess(settings, tmp_path / "market.log")
    market.start("--workers", "2")
    try:
        assert market.process is not None
        children = worker_pids(market.process.pid)
        # spawned workers serve the API (a resource tracker may run beside them)
        serving = [pid for pid in children if "spawn_main" in cmdline(pid)]
        assert len(serving) == 2, [cmdline(pid) for pid in children]
        async with httpx.AsyncClient(base_url=market.url, timeout=60) as http:
            provider = Party.new(http, settings.identity)
            posted = await provider.send("POST", "/offers", offer_terms(provider))
            assert posted.status_code == 201, posted.text
            consumer = Party.new(http, settings.identity)
            body = json.dumps(job_request(consumer)).encode()
            headers = consumer.headers("POST", "/jobs", body)
            headers["content-type"] = "application/json"
            answers = []
            for _ in range(8):  # a fresh connection each: either worker may take it
                async with httpx.AsyncClient(base_url=market.url, timeout=60) as fresh:
                    answers.append(await fresh.post("/jobs", content=body, headers=headers))
        assert [a.status_code for a in answers] == [201] + [409] * 7, answers[0].text
    finally:
        market.stop()


def cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
