"""Every explorer page over a database seeded directly (SQLite and PostgreSQL), without a chain:
each page answers as HTML and as the same JSON, text planted by parties comes back escaped,
lists page by keyset without overlap, and unknown ids are a 404 a person can read."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from pycardano import PaymentSigningKey, ScriptHash
from sqlmodel import Session

from offchain.market.explorer.queries import PAGE
from offchain.market.models import Cause, Job, JobEvent, JobState, LogLine, Offer, Provider
from offchain.market.services.chain import parse_ref
from offchain.market.services.chain_index import ChainBlock, ChainTx, ChainTxOut
from offchain.market.services.jobs import now_ms
from offchain.protocol.payloads import receipt_payload, sign
from tests.explorer.conftest import START_MS, explorer_over

PLANTED = "<script>window.pwned=1</script>"
PROVIDER = "ab" * 28
ADDRESS = "addr_test1vz2fxv2umyhttkxyxp8x0dlpdt3k6cwng5pxj3jhsydzer3jcu5d8"
TX = "cd" * 32
JOBS = PAGE + 10
SPEC = {"image": "python:3.11", "command": ["echo", PLANTED], "env": {"NOTE": PLANTED},
        "resources": {"gpus": 1, "cpu_cores": 1, "memory_mib": 512, "disk_mib": 1},
        "max_duration_s": 60, "max_price_lovelace": 1, "network": False}  # fmt: skip


def seed(session: Session) -> None:
    session.add(Provider(id=PROVIDER, vkey="00" * 32, payout_address=ADDRESS,
                         last_heartbeat_ms=now_ms()))  # fmt: skip
    session.flush()  # no relationships tell the flush to write the provider first
    session.add(Offer(provider_id=PROVIDER, body="{}", signature="", key="", gpu_model=PLANTED,
                      gpu_count=2, vram_mib=1, cpu_cores=1, memory_mib=1, disk_mib=1,
                      price_per_unit=1_500_000, created_at_ms=START_MS))  # fmt: skip
    for i in range(JOBS):
        job = Job(id=f"{i:032x}", consumer_vkey="00" * 32, consumer_id="ee" * 28,
                  consumer_address=ADDRESS, spec=json.dumps(SPEC), spec_digest="11" * 32,
                  max_price=1, provider_id=PROVIDER, gpu_model=PLANTED, state=JobState.FAILED,
                  failure_reason=PLANTED, created_at_ms=START_MS + i // 2,
                  updated_at_ms=START_MS)  # fmt: skip
        session.add(job)
        session.add(JobEvent(job_id=job.id, at_ms=START_MS, to_state=JobState.FAILED,
                             cause=Cause.CHAIN, detail=PLANTED, slot=5, block_height=5,
                             tx_id=TX))  # fmt: skip
    session.add(LogLine(job_id=f"{0:032x}", seq=0, at_ms=START_MS, text=PLANTED))
    session.add(ChainBlock(slot=5, height=5, block_id="ef" * 32, tx_count=1, indexed_txs=1))
    view = {
        "inputs": [],
        "withdrawals": [],
        "other_redeemers": [],
        "fee": 170_000,
        "valid_from_slot": None,
        "valid_until_slot": 9,
        "signers": [],
        "valid": True,
        "outputs": [
            {
                "address": ADDRESS,
                "lovelace": 2_000_000,
                "script": None,
                "datum": {"type": "unknown", "cbor": PLANTED},
                "tokens": False,
            }
        ],
    }
    session.add(ChainTx(tx_id=TX, slot=5, height=5, view=json.dumps(view)))
    session.add(ChainTxOut(ref=f"{TX}#0", slot=5, address=ADDRESS, lovelace=2_000_000,
                           datum=json.dumps({"type": PLANTED})))  # fmt: skip
    session.commit()


@pytest.fixture
def client(tmp_path, database_url) -> Iterator[TestClient]:
    with explorer_over(tmp_path, database_url, seed) as client:
        yield client


PAGES = [
    "/explorer", "/explorer/jobs", f"/explorer/jobs?provider={PROVIDER}&state=failed",
    f"/explorer/jobs/{0:032x}", "/explorer/providers", f"/explorer/providers/{PROVIDER}",
    f"/explorer/txs/{TX}", f"/explorer/addresses/{ADDRESS}",
]  # fmt: skip


@pytest.mark.parametrize("path", [*PAGES, "/explorer/blocks/5"])
def test_each_page_is_html_and_the_same_json(client, path):
    page = client.get(path)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert PLANTED not in page.text
    if path in PAGES:  # each of these shows planted text: escaped
        assert "&lt;script&gt;window.pwned=1&lt;/script&gt;" in page.text
    by_path = client.get("/api" + path)
    by_accept = client.get(path, headers={"accept": "application/json"})
    assert by_path.status_code == by_accept.status_code == 200
    assert by_path.json() == by_accept.json()


def test_jobs_page_by_keyset_newest_first_without_overlap(client):
    first = client.get("/api/explorer/jobs").json()
    assert len(first["jobs"]) == PAGE and first["next"]
    second = client.get("/api/explorer/jobs", params={"after": first["next"]}).json()
    assert second["next"] is None
    ids = [j["id"] for j in first["jobs"] + second["jobs"]]
    assert ids == sorted((f"{i:032x}" for i in range(JOBS)), reverse=True)
    html = client.get("/explorer/jobs")
    assert f"after={first['next']}" in html.text


def test_the_job_page_shows_what_the_market_recorded(client):
    data = client.get(f"/api/explorer/jobs/{0:032x}").json()
    assert [e["tx_id"] for e in data["events"]] == [TX]
    assert "logs" not in data and "failure_reason" not in data["job"]  # the consumer's only
    assert data["receipt"] is None and data["metering"] is None
    home = client.get("/api/explorer").json()
    assert home["gpus"] == [{"model": PLANTED, "offered": 2, "busy": 0, "free": 2,
                             "price_per_unit": 1_500_000}]  # fmt: skip
    assert home["tip"]["height"] == 5 and home["tip"]["time_ms"] == START_MS + 5000


def test_unknown_ids_are_404_pages_and_search_finds_each_kind(client):
    missing = client.get("/explorer/jobs/" + "ff" * 16)
    assert missing.status_code == 404 and "no job" in missing.text
    assert client.get("/api/explorer/txs/" + "00" * 32).status_code == 404
    for q, path in [(f"{1:032x}", f"/explorer/jobs/{1:032x}"), (TX, f"/explorer/txs/{TX}"),
                    (PROVIDER, f"/explorer/providers/{PROVIDER}"), ("5", "/explorer/blocks/5"),
                    (ADDRESS, f"/explorer/addresses/{ADDRESS}")]:  # fmt: skip
        found = client.get("/explorer/search", params={"q": q}, follow_redirects=False)
        assert (found.status_code, found.headers.get("location")) == (303, path), q
    nothing = client.get("/explorer/search", params={"q": PLANTED})
    assert PLANTED not in nothing.text and "Nothing found" in nothing.text


def test_a_tampered_receipt_signature_does_not_verify(client):
    """The job page checks the receipt itself: the provider's signature over its escrow's
    receipt verifies; the same receipt with one signature byte changed does not."""
    key = PaymentSigningKey.generate()
    units, result, evidence = 7, bytes(range(32)), bytes(32)
    shown = {}
    with Session(client.app.state.engine) as session:
        for job_id, tamper in (("a" * 32, False), ("b" * 32, True)):
            escrow = f"{job_id[:2] * 32}#0"
            payload = receipt_payload(0, ScriptHash(bytes(28)), parse_ref(escrow, "escrow"),
                                      units, result, evidence)  # fmt: skip
            signature = bytearray(sign(key, payload))
            signature[0] ^= tamper
            session.add(Job(
                id=job_id, consumer_vkey="00" * 32, consumer_id="ee" * 28,
                consumer_address=ADDRESS, spec=json.dumps(SPEC), spec_digest="11" * 32, max_price=1,
                provider_id=PROVIDER, provider_vkey=key.to_verification_key().payload.hex(),
                escrow_ref=escrow, receipt_units=units, receipt_result_hash=result.hex(),
                receipt_evidence_hash=evidence.hex(), receipt_signature=signature.hex(),
                state=JobState.COMPLETED, created_at_ms=START_MS, updated_at_ms=START_MS,
            ))  # fmt: skip
        session.commit()
    for job_id in ("a" * 32, "b" * 32):
        shown[job_id] = (
            client.get(f"/api/explorer/jobs/{job_id}").json()["receipt"]["verifies"],
            "Signature does NOT verify" in client.get(f"/explorer/jobs/{job_id}").text,
        )
    assert shown == {"a" * 32: (True, False), "b" * 32: (False, True)}
