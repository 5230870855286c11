"""Every explorer page over a database seeded directly (SQLite and PostgreSQL), without a chain:
each page answers as HTML and as the same JSON, text planted by parties comes back escaped,
lists page by keyset without overlap, and unknown ids are a 404 a person can read."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from html import unescape
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient
from pycardano import PaymentSigningKey, ScriptHash
from sqlmodel import Session

from offchain.market.explorer.format import ada, duration, per_hour, when
from offchain.market.explorer.queries import PAGE
from offchain.market.models import (
    Bond,
    Cause,
    ChainBlock,
    ChainTx,
    ChainTxOut,
    Channel,
    ChannelEvent,
    ChannelMove,
    ChannelState,
    Job,
    JobEvent,
    JobState,
    LogLine,
    Offer,
    Provider,
    Rental,
)
from offchain.market.services.chain import parse_ref
from offchain.market.services.jobs import now_ms
from offchain.protocol.job.job_state import SETTLE_NEXT
from offchain.protocol.ledger.payloads import receipt_payload, sign
from tests.explorer.conftest import START_MS, explorer_over

PLANTED = "<script>window.pwned=1</script>"
PROVIDER = "ab" * 28
ADDRESS = "addr_test1vz2fxv2umyhttkxyxp8x0dlpdt3k6cwng5pxj3jhsydzer3jcu5d8"
TX = "cd" * 32
JOBS = PAGE + 10
CHANNELS = PAGE + 3
CHANNEL = f"{CHANNELS - 1:056x}"  # the newest, moved by TX: opened, claimed, closing
CLOSING_AT = START_MS + 7_200_000
SPEC = {"image": "python:3.11", "command": ["echo", PLANTED], "env": {"NOTE": PLANTED},
        "resources": {"gpus": 1, "cpu_cores": 1, "memory_mib": 512, "disk_mib": 1},
        "max_duration_s": 60, "max_price_lovelace": 1, "network": False}  # fmt: skip

# an offer's GPU slices as signed: planted text in the model, the fault note and the note
SLICE = {"gpu_model": PLANTED, "memory_mib": 2048, "sm_percent": 25, "count": 3,
         "isolation": "mps", "fault_note": PLANTED, "price_per_unit": 800,
         "selftest": {"matmul_gflops": 7400, "alloc_ok_mib": 2048,
                      "past_limit_refused": True}}  # fmt: skip
GATEWAY = {"gateway_url": "http://gw.example:8710", "request_price": 1_500,
           "token_prices": [2, 8]}  # fmt: skip
SLICED_BODY = json.dumps({"gpu_slices": [SLICE], "gpu_slices_note": PLANTED, **GATEWAY})
SLICES_SHOWN = {"offered": 3, "busy": 0, "free": 3, "price_per_unit": 800,
                "sizes": [{"memory_mib": 2048, "sm_percent": 25, "isolation": "mps"}]}  # fmt: skip


def seed(session: Session) -> None:
    session.add(Provider(id=PROVIDER, vkey="00" * 32, payout_address=ADDRESS,
                         last_heartbeat_ms=now_ms()))  # fmt: skip
    session.flush()  # no relationships tell the flush to write the provider first
    session.add(Offer(provider_id=PROVIDER, body=SLICED_BODY, signature="", key="",
                      gpu_model=PLANTED, gpu_count=2, vram_mib=1, cpu_cores=1, memory_mib=1,
                      disk_mib=1, price_per_unit=1_500_000, created_at_ms=START_MS))  # fmt: skip
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
    seed_channels(session)
    seed_deployments(session)
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


def seed_channels(session: Session) -> None:
    """CHANNELS channels paying PROVIDER at ADDRESS from a renter whose stored address is
    planted text, two opened per slot; the newest opened with 10 ADA, then claimed 3 ADA and
    closing, each move by TX."""
    for i in range(CHANNELS):
        session.add(Channel(
            id=f"{i:056x}", renter=PLANTED, renter_vkey="01" * 32, provider=ADDRESS,
            provider_vkey="00" * 32, provider_id=PROVIDER, close_period_ms=3_600_000,
            nonce=f"{TX}#{i + 10}", open_tx=TX, opened_slot=5 + i // 2, ref=f"{TX}#4",
            state=ChannelState.CLOSING, funded=10_000_000, claimed=3_000_000,
            lovelace=7_000_000, closing_at_ms=CLOSING_AT,
        ))  # fmt: skip
    session.flush()
    moves = [
        (ChannelMove.OPEN, 10_000_000, ChannelState.OPEN, 0, None),
        (ChannelMove.CLAIM, 3_000_000, ChannelState.OPEN, 3_000_000, None),
        (ChannelMove.START_CLOSE, 0, ChannelState.CLOSING, 3_000_000, CLOSING_AT),
    ]
    for move, amount, state, claimed, closing_at in moves:
        session.add(ChannelEvent(
            channel_id=CHANNEL, move=move, amount=amount, tx_id=TX, slot=5, height=5,
            ref=f"{TX}#4", state=state, funded=10_000_000, claimed=claimed,
            lovelace=10_000_000 - claimed, closing_at_ms=closing_at,
        ))  # fmt: skip


DEPLOYMENTS = PAGE + 2  # on CHANNEL, but the newest: on a channel the index does not hold
UNINDEXED = "9f" * 28


def seed_deployments(session: Session) -> None:
    """DEPLOYMENTS of PROVIDER, two created per ms, ids 1 on, oldest first; every one failed
    for a planted reason with a planted image; the newest a pod on a channel not indexed."""
    for i in range(DEPLOYMENTS):
        newest = i == DEPLOYMENTS - 1
        session.add(Rental(
            provider_id=PROVIDER, name=f"svc-{i}", kind="pod" if newest else "endpoint",
            channel=UNINDEXED if newest else CHANNEL, image_digest=PLANTED, state="failed",
            reason=PLANTED, price_per_request=1_000, price_per_second=100,
            created_ms=START_MS + i // 2, started_ms=START_MS, stopped_ms=START_MS + 2_000,
            requests=3, served=3_000, seconds_run=2, first_reported_ms=START_MS,
            reported_ms=START_MS + 3_000,
        ))  # fmt: skip


@pytest.fixture
def client(tmp_path, database_url) -> Iterator[TestClient]:
    with explorer_over(tmp_path, database_url, seed) as client:
        yield client


PAGES = [
    "/explorer", "/explorer/jobs", f"/explorer/jobs?provider={PROVIDER}&state=failed",
    f"/explorer/jobs/{0:032x}", "/explorer/providers", f"/explorer/providers/{PROVIDER}",
    f"/explorer/txs/{TX}", f"/explorer/addresses/{ADDRESS}", "/explorer/channels",
    f"/explorer/channels?provider={PROVIDER}&state=closing", f"/explorer/channels/{CHANNEL}",
    "/explorer/deployments", f"/explorer/deployments?provider={PROVIDER}&state=failed&kind=pod",
    f"/explorer/deployments?channel={CHANNEL}", "/explorer/deployments/1",
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


def test_gpu_slices_show_their_isolation_fault_note_and_self_test_escaped(client):
    home = client.get("/api/explorer").json()
    (model,) = [g for g in home["gpus"] if g["slices"]]
    assert model["slices"] == SLICES_SHOWN
    assert "3 free of 3 from" in seen(client.get("/explorer").text)
    page = client.get(f"/explorer/providers/{PROVIDER}")
    said = seen(page.text)
    assert "3 \u00d7 2048 MiB / 25% SMs of <script>" in said and "MPS: <script>" in said
    assert "7400 GFLOP/s matmul, 2048 MiB allocated, past the limit refused" in said
    assert "Not shared: <script>" in said and PLANTED not in page.text
    assert "3 \u00d7 25% / 2048 MiB slice (MPS)" in seen(client.get("/explorer/providers").text)
    shown = client.get(f"/api/explorer/providers/{PROVIDER}").json()["provider"]
    assert shown["gpu_slices"] == [SLICE] and shown["gpu_slices_note"] == PLANTED


def test_a_provider_shows_its_gateway_and_the_least_a_request_and_a_token_cost(client):
    said = seen(client.get(f"/explorer/providers/{PROVIDER}").text)
    assert ("at http://gw.example:8710 ; a request from 0.001500 ADA; an input token from "
            "2.000000 ADA per million tokens (2 lovelace each), an output token from "
            "8.000000 ADA per million tokens (8 lovelace each)") in said  # fmt: skip
    shown = client.get(f"/api/explorer/providers/{PROVIDER}").json()["provider"]["gateway"]
    assert shown == {"url": "http://gw.example:8710", "request_price": 1_500,
                     "input_token_price": 2, "output_token_price": 8}  # fmt: skip


def two_pages(client: TestClient, name: str) -> list:
    """The ids of the list `name` (jobs, channels, ...) read by its cursor: a full page, then
    the rest with no cursor after it; the HTML page links the second."""
    first = client.get(f"/api/explorer/{name}").json()
    assert len(first[name]) == PAGE and first["next"]
    second = client.get(f"/api/explorer/{name}", params={"after": first["next"]}).json()
    assert second["next"] is None
    assert f"after={first['next']}" in client.get(f"/explorer/{name}").text
    return [row["id"] for row in first[name] + second[name]]


def test_jobs_page_by_keyset_newest_first_without_overlap(client):
    ids = two_pages(client, "jobs")
    assert ids == sorted((f"{i:032x}" for i in range(JOBS)), reverse=True)


def test_the_job_page_shows_what_the_market_recorded(client):
    data = client.get(f"/api/explorer/jobs/{0:032x}").json()
    assert [e["tx_id"] for e in data["events"]] == [TX]
    assert "logs" not in data and "failure_reason" not in data["job"]  # the consumer's only
    assert data["receipt"] is None and data["metering"] is None
    home = client.get("/api/explorer").json()
    assert home["gpus"] == [{"model": PLANTED, "offered": 2, "busy": 0, "free": 2,
                             "price_per_unit": 1_500_000, "slices": SLICES_SHOWN}]  # fmt: skip
    assert home["tip"]["height"] == 5 and home["tip"]["time_ms"] == START_MS + 5000
    assert home["channels"] == {"count": CHANNELS, "lovelace": CHANNELS * 7_000_000}


def test_unknown_ids_are_404_pages_and_search_finds_each_kind(client):
    missing = client.get("/explorer/jobs/" + "ff" * 16)
    assert missing.status_code == 404 and "no job" in missing.text
    assert client.get("/api/explorer/txs/" + "00" * 32).status_code == 404
    missing = client.get("/explorer/channels/" + "ff" * 28)
    assert missing.status_code == 404 and "no channel" in missing.text
    for q, path in [(f"{1:032x}", f"/explorer/jobs/{1:032x}"), (TX, f"/explorer/txs/{TX}"),
                    (PROVIDER, f"/explorer/providers/{PROVIDER}"), ("5", "/explorer/blocks/5"),
                    (ADDRESS, f"/explorer/addresses/{ADDRESS}"),
                    (CHANNEL.upper(), f"/explorer/channels/{CHANNEL}")]:  # fmt: skip
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


# --- issue 19: jobs named as people copy them, dates and prices as people read them ------------

JOB = "c0ffee00" + "5" * 24
DIGEST = "7e" * 32
ESCROW = f"{TX}#1"
HOUR_MS = 3_600_000


def seen(html: str) -> str:
    """The page's text as a person reads it: no tags, entities decoded, spaces collapsed."""
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", html)).split())


def add_settled_job(client: TestClient) -> int:
    """A job settled by TX (its settling and its settled move both name TX), priced at the
    provider default of 169 lovelace/s, its deadline an hour after now; returns the deadline."""
    deadline = now_ms() + HOUR_MS
    with Session(client.app.state.engine) as session:
        session.add(Job(
            id=JOB, consumer_vkey="00" * 32, consumer_id="ee" * 28, consumer_address=ADDRESS,
            spec=json.dumps(SPEC), spec_digest=DIGEST, max_price=1, provider_id=PROVIDER,
            price_per_unit=169, max_units=60, deadline_ms=deadline, settle_window_ms=600_000,
            fee_allowance=2_000_000, lock_lovelace=12_345_678, escrow_ref=ESCROW,
            settle_tx=TX, state=JobState.SETTLED, created_at_ms=START_MS, updated_at_ms=START_MS,
        ))  # fmt: skip
        session.flush()
        for state in (JobState.SETTLING, JobState.SETTLED):
            session.add(JobEvent(job_id=JOB, at_ms=START_MS, to_state=state, cause=Cause.CHAIN,
                                 slot=5, block_height=5, tx_id=TX))  # fmt: skip
        session.commit()
    return deadline


def test_search_and_the_job_page_take_a_prefix_the_escrow_ref_or_the_spec_digest(client):
    add_settled_job(client)
    for q in (JOB[:8], JOB[:8].upper(), JOB[:20], ESCROW, ESCROW.upper(), DIGEST):
        found = client.get("/explorer/search", params={"q": q}, follow_redirects=False)
        assert found.status_code == 303 and found.headers["location"] == f"/explorer/jobs/{JOB}", q
        page = client.get(f"/explorer/jobs/{quote(q, safe='')}")
        assert page.status_code == 200 and JOB in page.text, q
        assert client.get(f"/api/explorer/jobs/{quote(q, safe='')}").json()["job"]["id"] == JOB
    # the seeded jobs' ids all begin with 8 zeros and share one spec digest: which one is meant?
    for q in ("00000000", "11" * 32):
        shared = client.get("/explorer/search", params={"q": q})
        assert shared.status_code == 409 and f"names {JOBS} jobs" in seen(shared.text), q
        page = client.get(f"/explorer/jobs/{q}")
        assert page.status_code == 409 and f"names {JOBS} jobs" in seen(page.text), q
        api = client.get(f"/api/explorer/jobs/{q}")
        assert (api.status_code, api.json()["detail"][0]["loc"]) == (409, ["job_id"]), api.text
    for q in (JOB[:7], "c0ffee01", f"{TX}#9"):  # too short to be a prefix, no such job, no escrow
        assert "Nothing found" in client.get("/explorer/search", params={"q": q}).text, q
        assert client.get(f"/explorer/jobs/{quote(q, safe='')}").status_code == 404, q


def test_the_job_page_says_which_id_is_which_with_dates_and_prices_per_hour(client):
    deadline = add_settled_job(client)
    text = seen(client.get(f"/explorer/jobs/{JOB[:8]}").text)
    assert f"Market job id {JOB} — the market's own id" in text
    assert f"On-chain job_id {DIGEST} — the spec's digest" in text
    tip = client.get("/api/explorer").json()["tip"]["time_ms"]  # its countdowns' now
    assert f"Deadline {when(deadline)} (in {duration(deadline - tip)}, chain time)" in text
    closes = deadline + 600_000
    assert f"Escrow closes {when(closes)} (in {duration(closes - tip)}, chain time)" in text
    assert str(deadline) not in text  # never the raw ms
    # 169 lovelace/s is 608,400 lovelace per hour: exact, with the on-chain unit beside it
    assert "Price 0.608400 ADA per hour (169 lovelace per s)" in text
    listed = seen(client.get("/explorer/jobs?state=settled").text)
    assert "0.608400 ADA per hour (169 lovelace per s)" in listed and "Price per s" not in listed
    offered = seen(client.get(f"/explorer/providers/{PROVIDER}").text)
    assert "at 5,400.000000 ADA per hour (1,500,000 lovelace per s)" in offered
    assert "5,400.000000 ADA per hour" in seen(client.get("/explorer/providers").text)
    assert "5,400.000000 ADA per hour" in seen(client.get("/explorer").text)


def test_the_settle_transaction_lists_each_job_once_and_the_address_says_ada(client):
    add_settled_job(client)
    tx = client.get(f"/explorer/txs/{TX}")
    assert tx.text.count(f'href="/explorer/jobs/{JOB}"') == 1  # settling then settled: once
    assert f"{JOB[:10]}…{JOB[-6:]} → settled" in seen(tx.text)
    assert [JOB, "settled"] in client.get(f"/api/explorer/txs/{TX}").json()["jobs"]
    address = seen(client.get(f"/explorer/addresses/{ADDRESS}").text)
    assert "Amount (ADA)" in address and "2.000000 ADA" in address and "Lovelace" not in address


def test_ada_is_integer_exact():
    """Lovelace to ADA with integers only: a float would round 2^53 + 1 lovelace away."""
    assert ada(2**53 + 1) == "9,007,199,254.740993 ADA"
    assert ada(10**20 + 7) == "100,000,000,000,000.000007 ADA" and ada(-1) == "-0.000001 ADA"
    hourly = "32,425,917,317,067.574800 ADA per hour (9,007,199,254,740,993 lovelace per s)"
    assert per_hour(2**53 + 1) == hourly


def test_an_unbonding_bond_says_until_when_it_covers_jobs_as_a_date_with_the_time_left(client):
    with Session(client.app.state.engine) as session:
        session.add(Bond(ref=f"{TX}#2", provider_id=PROVIDER, lovelace=500_000_000,
                         unbonding_since_ms=now_ms(), created_slot=5))  # fmt: skip
        session.commit()
    bond = client.get(f"/api/explorer/providers/{PROVIDER}").json()["bonds"][0]
    text = seen(client.get(f"/explorer/providers/{PROVIDER}").text)
    assert f"before {when(bond['covers_before_ms'])} (in " in text
    assert "Amount (ADA)" in text and str(bond["covers_before_ms"]) not in text


# --- issue 22: payment channels -----------------------------------------------------------------


def test_channels_page_by_keyset_newest_first_without_overlap(client):
    ids = two_pages(client, "channels")
    assert ids == sorted((f"{i:056x}" for i in range(CHANNELS)), reverse=True)
    assert client.get("/api/explorer/channels", params={"state": "open"}).json()["channels"] == []
    by_payee = client.get("/api/explorer/channels", params={"payee": ADDRESS}).json()
    assert len(by_payee["channels"]) == PAGE


def test_the_channel_page_shows_its_terms_amounts_close_and_every_transaction(client):
    data = client.get(f"/api/explorer/channels/{CHANNEL.upper()}").json()
    assert data["channel"]["id"] == CHANNEL
    assert [(e["move"], e["amount"], e["tx_id"]) for e in data["events"]] == [
        ("open", 10_000_000, TX),
        ("claim", 3_000_000, TX),
        ("start-close", 0, TX),
    ]
    text = seen(client.get(f"/explorer/channels/{CHANNEL}").text)
    assert "Put in 10.000000 ADA" in text and "Claimed 3.000000 ADA" in text
    assert "Remaining 7.000000 ADA" in text
    tip = client.get("/api/explorer").json()["tip"]["time_ms"]  # its countdowns' now
    assert f"Closing at {when(CLOSING_AT)} (in {duration(CLOSING_AT - tip)}, chain time)" in text
    assert str(CLOSING_AT) not in text
    assert "Close period 1 h 00 m 00 s" in text
    tx = client.get(f"/explorer/txs/{TX}").text  # one line per move (a seed's three)
    assert tx.count(f'href="/explorer/channels/{CHANNEL}"') == 3
    assert [CHANNEL, "open"] in client.get(f"/api/explorer/txs/{TX}").json()["channels"]
    provider = client.get(f"/api/explorer/providers/{PROVIDER}").json()["channels"]
    assert provider[0]["id"] == CHANNEL and len(provider) == 16
    address = client.get(f"/api/explorer/addresses/{ADDRESS}").json()["channels"]
    assert address["renter"] == [] and address["payee"][0]["id"] == CHANNEL


# --- issue 23: endpoints and pods -----------------------------------------------------------------


def test_deployments_page_by_keyset_newest_first_without_overlap(client):
    assert two_pages(client, "deployments") == list(range(DEPLOYMENTS, 0, -1))
    pods = client.get("/api/explorer/deployments", params={"kind": "pod"}).json()["deployments"]
    assert [(d["name"], d["channel_claimed"]) for d in pods] == [(f"svc-{DEPLOYMENTS - 1}", None)]
    for cursor in ("5.x", f"5.{10**20}"):  # a cursor of another list, a key past a row number
        answer = client.get("/api/explorer/deployments", params={"after": cursor})
        assert answer.status_code == 422 and answer.json()["detail"][0]["loc"] == ["after"]


def test_the_deployment_page_shows_its_channel_claimed_and_what_it_served(client):
    data = client.get("/api/explorer/deployments/1").json()
    shown = data["deployment"]
    assert (shown["name"], shown["provider_id"], shown["channel"]) == ("svc-0", PROVIDER, CHANNEL)
    assert (shown["channel_claimed"], shown["channel_state"]) == (3_000_000, "closing")
    assert shown["lovelace"] == 3_000 + 100 * 2  # per request and per second
    assert len(data["on_channel"]) == 16 and data["channel_lovelace"] == 16 * 3_200
    page = client.get("/explorer/deployments/1").text
    text = seen(page)
    assert "Channel claimed" in text and "Claimed on it 3.000000 ADA, for every deployment" in text
    assert "Requests 3" in text and "Seconds run 2" in text and "Served 0.003200 ADA" in text
    for link in (f'href="/explorer/channels/{CHANNEL}"', f'href="/explorer/providers/{PROVIDER}"'):
        assert link in page
    newest = seen(client.get(f"/explorer/deployments/{DEPLOYMENTS}").text)
    assert "Claimed on it not indexed" in newest and "Pod svc-" in newest
    assert "pays another provider" not in page
    with Session(client.app.state.engine) as session:  # a channel indexed after the report
        session.add(Provider(id="cd" * 28, vkey="00" * 32, payout_address=ADDRESS,
                             last_heartbeat_ms=START_MS))  # fmt: skip
        session.flush()
        session.get(Rental, 1).provider_id = "cd" * 28
        session.commit()
    assert client.get("/api/explorer/deployments/1").json()["deployment"]["channel_payee_differs"]
    assert "this channel pays another provider" in client.get("/explorer/deployments/1").text
    missing = client.get("/explorer/deployments/999")
    assert missing.status_code == 404 and "no deployment 999" in missing.text
    # the provider's, the channel's and the home page link them
    for path, newest, more in [
        (f"/explorer/providers/{PROVIDER}", DEPLOYMENTS, f"provider={PROVIDER}"),
        (f"/explorer/channels/{CHANNEL}", DEPLOYMENTS - 1, f"channel={CHANNEL}"),
    ]:  # fmt: skip
        page = client.get(path).text
        assert f'href="/explorer/deployments/{newest}"' in page, path
        assert f'href="/explorer/deployments?{more}"' in page, path
    provider = client.get(f"/api/explorer/providers/{PROVIDER}").json()["deployments"]
    assert [d["id"] for d in provider] == list(range(DEPLOYMENTS, DEPLOYMENTS - 16, -1))
    channel = client.get(f"/api/explorer/channels/{CHANNEL}").json()["deployments"]
    assert channel[0]["id"] == DEPLOYMENTS - 1
    home = client.get("/explorer")
    assert 'href="/explorer/deployments"' in home.text
    assert client.get("/api/explorer").json()["deployments"] == {"failed": DEPLOYMENTS}


def test_a_provider_and_a_channel_are_found_by_the_prefix_the_cli_prints(client):
    short = PROVIDER[:16]  # `channel list`, `endpoint deploy`: 16 hex digits
    found = client.get("/explorer/search", params={"q": short}, follow_redirects=False)
    assert (found.status_code, found.headers["location"]) == (
        303,
        f"/explorer/providers/{PROVIDER}",
    )
    page = client.get(f"/api/explorer/providers/{short.upper()}")
    assert page.status_code == 200 and page.json()["provider"]["id"] == PROVIDER, page.text
    shared = client.get("/explorer/search", params={"q": CHANNEL[:-1]})  # several channels share it
    assert shared.status_code == 409 and "names several channels" in seen(shared.text)
    assert client.get(f"/api/explorer/providers/{PROVIDER[:7]}").status_code == 404  # too short


def test_a_cpu_provider_shows_its_bundle_and_price_and_no_blank_gpu_row(client):
    cpu = "cd" * 28
    with Session(client.app.state.engine) as session:
        session.add(Provider(id=cpu, vkey="11" * 32, payout_address=ADDRESS,
                             last_heartbeat_ms=now_ms()))  # fmt: skip
        session.flush()
        session.add(Offer(provider_id=cpu, body="{}", signature="", key="", gpu_model="",
                          gpu_count=0, vram_mib=0, cpu_cores=4, memory_mib=8192, disk_mib=1,
                          price_per_unit=50, created_at_ms=START_MS))  # fmt: skip
        session.commit()
    home = client.get("/api/explorer").json()
    assert [g["model"] for g in home["gpus"]] == [PLANTED]  # no row for "no GPU"
    page = client.get(f"/api/explorer/providers/{cpu}").json()["provider"]
    assert page["cpu_bundles"] == [{"cpu_cores": 4, "memory_mib": 8192, "price_per_unit": 50}]
    shown = seen(client.get(f"/explorer/providers/{cpu}").text)
    assert "CPU bundles 4 cores, 8192 MiB at 0.180000 ADA per hour" in shown, shown


def test_a_completed_job_says_what_is_left_to_happen(client):
    with Session(client.app.state.engine) as session:
        job = session.get(Job, f"{0:032x}")
        job.state = JobState.COMPLETED
        session.add(job)
        session.commit()
    text = seen(client.get(f"/explorer/jobs/{0:032x}").text)
    assert f"Completed: its receipt is signed; {SETTLE_NEXT}." in text, text
    assert client.get(f"/api/explorer/jobs/{0:032x}").json()["job"]["next"] == SETTLE_NEXT
    other = seen(client.get(f"/explorer/jobs/{1:032x}").text)  # failed: no such line
    assert "its settlement is next" not in other


def test_table_amounts_show_their_lovelace_on_hover(client):
    page = client.get("/explorer/channels").text
    assert '<span title="7,000,000 lovelace">7.000000 ADA</span>' in page  # each one's put in
