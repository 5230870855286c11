"""The explorer over stored values at and past every bound, on SQLite and PostgreSQL: sums of the
ledger's largest amounts stay exact (SQLite's sum() overflowed past 2**63 and the home page
answered 500 for good), a panel that cannot be read is shown as unavailable while the rest of
the page stands, a stored time no calendar can show is written as a number, and cursors or
heights that are not what a page wrote are a 422 naming the field, never a 500."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text
from sqlmodel import Session

from offchain.market.explorer.format import ada
from offchain.market.explorer.queries import DAY_MS
from offchain.market.models import (
    Cause,
    ChainBlock,
    Channel,
    ChannelState,
    Job,
    JobEvent,
    JobState,
    Provider,
)
from offchain.market.schemas import MAX_PRICE_PER_UNIT
from offchain.protocol.job.jobspec import MAX_DURATION_S, MAX_SUPPLY_LOVELACE
from offchain.protocol.job.offer import SelfTestSummary
from tests.explorer.conftest import START_MS, explorer_over

PROVIDER = "ab" * 28
ADDRESS = "addr_test1vz2fxv2umyhttkxyxp8x0dlpdt3k6cwng5pxj3jhsydzer3jcu5d8"
EACH = 206  # 206 locks of all ADA there is: past 2**63 summed
SETTLED_EACH = MAX_PRICE_PER_UNIT * MAX_DURATION_S  # the most one job can pay its provider
FAR_MS = 10**18  # a time in the year 31,690,708: what a key once could claim for its self-test


def _job(i: int, state: JobState, **fields) -> Job:
    return Job(id=f"{i:032x}", consumer_vkey="00" * 32, consumer_id="ee" * 28,
               consumer_address=ADDRESS, spec=json.dumps({"resources": {"gpus": 0}}),
               spec_digest="11" * 32, max_price=MAX_SUPPLY_LOVELACE, provider_id=PROVIDER,
               state=state, created_at_ms=START_MS + i, updated_at_ms=START_MS,
               **fields)  # fmt: skip


def seed(session: Session) -> None:
    """A provider online; EACH quoted and EACH funded jobs locking all ADA there is; EACH
    settled jobs that paid the most a job can, in the block at the tip; EACH open channels
    holding all ADA there is."""
    selftest = SelfTestSummary(passed=True, at_ms=FAR_MS, checks=[])
    session.add(Provider(id=PROVIDER, vkey="00" * 32, payout_address=ADDRESS,
                         last_heartbeat_ms=FAR_MS, offline_since_ms=FAR_MS,
                         selftest=selftest.model_dump_json()))  # fmt: skip
    session.add(ChainBlock(slot=5, height=5, block_id="ef" * 32, tx_count=1, indexed_txs=0))
    session.flush()
    running = _job(-1, JobState.RUNNING, gpu_model="H100")
    running.spec = json.dumps({"resources": {"gpus": 2}})
    session.add(running)
    for i in range(EACH):
        for n, state in enumerate((JobState.QUOTED, JobState.FUNDED)):
            session.add(_job(3 * i + n, state, lock_lovelace=MAX_SUPPLY_LOVELACE))
        settled = _job(3 * i + 2, JobState.SETTLED, price_per_unit=MAX_PRICE_PER_UNIT,
                       receipt_units=MAX_DURATION_S, lock_lovelace=MAX_SUPPLY_LOVELACE)  # fmt: skip
        session.add(settled)
        session.add(JobEvent(job_id=settled.id, at_ms=START_MS + i, to_state=JobState.SETTLED,
                             cause=Cause.CHAIN, slot=5, block_height=5))  # fmt: skip
        session.add(Channel(
            id=f"{i:056x}", renter=ADDRESS, renter_vkey="01" * 32, provider=ADDRESS,
            provider_vkey="00" * 32, provider_id=PROVIDER, close_period_ms=1, nonce=f"{i}#0",
            open_tx="ab" * 32, opened_slot=5, ref=f"{i}#0", state=ChannelState.OPEN,
            funded=MAX_SUPPLY_LOVELACE, claimed=0, lovelace=MAX_SUPPLY_LOVELACE,
        ))  # fmt: skip
    session.commit()


@pytest.fixture
def client(tmp_path, database_url) -> Iterator[TestClient]:
    with explorer_over(tmp_path, database_url, seed, seed_once=True) as client:
        yield client


def test_sums_of_the_largest_amounts_are_exact(client):
    home = client.get("/api/explorer").json()
    assert home["unavailable"] == []
    assert home["jobs_running"] == 1 and home["gpus"][0]["busy"] == 2  # SQLite counted 0
    assert home["escrow_lovelace"] == EACH * MAX_SUPPLY_LOVELACE > 2**63
    assert home["settled_24h_lovelace"] == EACH * SETTLED_EACH > 2**63
    assert home["channels"] == {"count": EACH, "lovelace": EACH * MAX_SUPPLY_LOVELACE}
    page = client.get("/explorer")
    assert page.status_code == 200
    assert ada(EACH * MAX_SUPPLY_LOVELACE) in page.text
    earned = client.get(f"/api/explorer/providers/{PROVIDER}").json()["earnings"]
    day = START_MS // DAY_MS * DAY_MS  # the settlements' ms differ, their day does not
    assert earned == [{"day_ms": day, "lovelace": EACH * SETTLED_EACH}]


def test_a_panel_that_cannot_be_read_fails_alone(client):
    """The chain index's table gone: the tip, the recent blocks and the day's settlements are
    unavailable; providers, jobs and escrow are still shown, as HTML and as JSON."""
    with Session(client.app.state.engine) as session:
        session.execute(text(f"DROP TABLE {ChainBlock.__tablename__}"))
        session.commit()
    home = client.get("/api/explorer")
    assert home.status_code == 200
    data = home.json()
    assert sorted(data["unavailable"]) == ["blocks", "settled_24h_lovelace", "tip"]
    assert data["providers_online"] == 1 and len(data["jobs"]) == 8
    assert data["escrow_lovelace"] == EACH * MAX_SUPPLY_LOVELACE
    page = client.get("/explorer")
    assert page.status_code == 200
    assert page.text.count(">unavailable<") == 2  # the tip's and the day's settlements' cards
    assert "could not read this just now" in page.text  # the blocks table


def test_a_stored_time_past_the_calendar_is_shown_as_a_number(client):
    for path in ("/explorer/providers", f"/explorer/providers/{PROVIDER}"):
        page = client.get(path)
        assert page.status_code == 200, path
        assert f"{FAR_MS} ms since 1970 (no date)" in page.text, path


CURSORS = ["9" * 30 + ".ab", "9" * 5000 + ".ab", "²." + "ab", "1.ab\x00", "12", "x.ab", "1.a b"]


@pytest.mark.parametrize("cursor", CURSORS)
@pytest.mark.parametrize(
    "path", ["/explorer/jobs", f"/explorer/addresses/{ADDRESS}", "/explorer/channels",
             "/explorer/deployments"],
)  # fmt: skip
def test_a_cursor_no_page_wrote_is_a_422_naming_it(client, path, cursor):
    answer = client.get("/api" + path, params={"after": cursor})
    assert answer.status_code == 422, answer.text
    assert ["after"] in [problem["loc"][-1:] for problem in answer.json()["detail"]]
    assert client.get(path, params={"after": cursor}).status_code == 422  # a page for people


def test_heights_filters_and_searches_past_every_bound_are_4xx(client):
    for path, params, field in [
        (f"/api/explorer/blocks/{10**30}", {}, "height"),
        ("/api/explorer/blocks/-1", {}, "height"),
        (f"/api/explorer/deployments/{10**30}", {}, "deployment_id"),
        ("/api/explorer/deployments/1.5", {}, "deployment_id"),
        ("/api/explorer/deployments", {"after": "1." + "9" * 30}, "after"),
        ("/api/explorer/jobs", {"state": "failed\x00"}, "state"),
        ("/api/explorer/providers", {"after": "\x00"}, "after"),
        ("/api/explorer/search", {"q": "ab\x00"}, "q"),
    ]:
        answer = client.get(path, params=params)
        assert answer.status_code == 422, (path, answer.text)
        assert [field] in [p["loc"][-1:] for p in answer.json()["detail"]], (path, answer.text)
    assert client.get("/api/explorer/search", params={"q": "²"}).json()["path"] is None
    live = f"/explorer/jobs/{0:032x}/live"  # refused before any stream opens
    for params, headers, field in [
        ({"after": str(10**30)}, {}, "after"),
        ({}, {"last-event-id": "²".encode()}, "last-event-id"),
        ({}, {"last-event-id": "9" * 5000}, "last-event-id"),
    ]:  # fmt: skip
        answer = client.get(live, params=params, headers=headers)
        assert answer.status_code == 422, answer.text
        assert [field] in [p["loc"][-1:] for p in answer.json()["detail"]], answer.text
    assert client.get("/api/explorer/blocks/5").status_code == 200
