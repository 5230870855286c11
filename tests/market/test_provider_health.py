"""A provider's health as the explorer shows it: uptime from heartbeat spans (one row per
stretch online, summed per window in one grouped query) and the self-test summary its latest
signed offer carried, from `unchained provider selftest` through the daemon's offer."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine
from sqlmodel import Session

from offchain.chain.time import ChainTime, Era
from offchain.market.explorer import routes
from offchain.market.explorer.format import duration, when
from offchain.market.explorer.queries import Scripts
from offchain.market.models import Bond, OnlineSpan, Provider
from offchain.market.services import health
from offchain.market.services.jobs import now_ms
from offchain.market.settings import MarketSettings
from offchain.protocol.job.jobspec import Resources
from provider.capacity import Bundle
from provider.daemon.bond import BondView
from provider.daemon.offers import offer_terms
from provider.selftest.checks import Check, load_summary, save_summary
from tests.market.client import Party
from tests.market.database import engine_at_head
from tests.market.flow import stored
from tests.protocol.onchain import NOTICE_MS, REFUND_WINDOW_MS, wallet

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
ONLINE_MS = 120_000
BEAT_MS = 60_000
IDS = ("aa" * 28, "bb" * 28, "cc" * 28)


@pytest.fixture
def engine(tmp_path, database_url) -> Iterator[Engine]:
    made = engine_at_head(MarketSettings(data_dir=tmp_path / "market", database_url=database_url))
    with Session(made) as session:
        for provider_id in IDS:
            session.add(Provider(id=provider_id, vkey="00" * 32, payout_address="addr_test1",
                                 last_heartbeat_ms=0))  # fmt: skip
        session.commit()
    yield made
    made.dispose()


def beat(session: Session, provider_id: str, start_ms: int, end_ms: int) -> None:
    """Heartbeats every minute from `start_ms` to `end_ms`, as the market receives them."""
    for at in range(start_ms, end_ms + 1, BEAT_MS):
        health.heartbeat(session, provider_id, at, ONLINE_MS)


def test_uptime_sums_the_spans_inside_each_window(engine):
    now = 10 * DAY_MS
    a, b, _idle = IDS
    with Session(engine) as session:
        beat(session, a, now - 30 * HOUR_MS, now - 20 * HOUR_MS)  # 4 h of it in the last day
        beat(session, a, now - 2 * HOUR_MS, now)
        beat(session, a, now - 8 * DAY_MS, now - 8 * DAY_MS + HOUR_MS)  # older than a week
        beat(session, b, now - HOUR_MS, now - HOUR_MS + 10 * BEAT_MS)
        beat(session, b, now - HOUR_MS + 13 * BEAT_MS, now - HOUR_MS + 20 * BEAT_MS)  # 3 min gap
        found = health.uptime(session, IDS, now)
    assert found == {
        a: {"24h": 6 * HOUR_MS, "7d": 12 * HOUR_MS},
        b: {"24h": 17 * BEAT_MS, "7d": 17 * BEAT_MS},
        IDS[2]: {"24h": 0, "7d": 0},
    }
    spans = {(s.provider_id, s.start_ms, s.end_ms) for s in _spans(engine)}
    assert len(spans) == 5  # a stretch online is one row, however many heartbeats it took


def test_the_pages_show_uptime_and_the_json_carries_it(engine, tmp_path):
    now = now_ms()
    a = IDS[0]
    with Session(engine) as session:  # spans clear of the windows' edges: exact as time moves
        beat(session, a, now - 2 * HOUR_MS, now - HOUR_MS)
        beat(session, a, now - 3 * DAY_MS, now - 3 * DAY_MS + HOUR_MS)
    with explorer(engine, tmp_path, now - DAY_MS) as client:
        listed = client.get("/api/explorer/providers").json()["providers"]
        page = client.get(f"/explorer/providers/{a}").text
        listing = client.get("/explorer/providers").text
    uptime = {p["id"]: p["uptime"] for p in listed}
    assert uptime[a] == {"24h": {"online_ms": HOUR_MS, "of_ms": DAY_MS},
                         "7d": {"online_ms": 2 * HOUR_MS, "of_ms": 7 * DAY_MS}}  # fmt: skip
    assert uptime[IDS[1]]["24h"]["online_ms"] == 0
    for html in (page, listing):
        assert "4.2 % / 1.2 %" in html and "not reported" in html


def test_the_provider_page_says_which_jobs_its_bonds_cover(engine, tmp_path):
    """Issue 18 B: an active bond covers the jobs closing within its notice less the refund
    window from now; an unbonding one those closing before its notice's end less the window."""
    a, since = IDS[0], 1_700_000_000_000
    active, unbonding = "11" * 32 + "#0", "22" * 32 + "#0"
    with Session(engine) as session:
        provider = session.get(Provider, a)
        assert provider is not None
        provider.bond_ref, provider.bond_lovelace, provider.bond_state = active, 400, "active"
        session.add(provider)
        session.add(Bond(ref=active, provider_id=a, lovelace=400, created_slot=2))
        session.add(Bond(ref=unbonding, provider_id=a, lovelace=300, unbonding_since_ms=since,
                         created_slot=1))  # fmt: skip
        session.commit()
    with explorer(engine, tmp_path, since) as client:
        shown = client.get(f"/api/explorer/providers/{a}").json()
        page = client.get(f"/explorer/providers/{a}").text
    covers_ms, ends = NOTICE_MS - REFUND_WINDOW_MS, since + NOTICE_MS - REFUND_WINDOW_MS
    assert shown["provider"]["bond"]["covers_ms"] == covers_ms
    assert [b["covers_before_ms"] for b in shown["bonds"]] == [None, ends]
    assert f"covers jobs closing within {duration(covers_ms)} of now" in page
    assert f"before {when(ends)}" in page


@contextmanager
def explorer(engine: Engine, tmp_path, start_ms: int) -> Iterator[TestClient]:
    """The explorer over `engine`, its chain starting at `start_ms`, with the test bond terms."""
    settings = MarketSettings(data_dir=tmp_path / "market")
    clock = ChainTime(start_ms, (Era(0, 0, None, 1000),))
    scripts = Scripts(0, bytes(28), NOTICE_MS, REFUND_WINDOW_MS)
    with TestClient(
        routes.explorer_app(settings, engine, routes.ExplorerState(scripts, clock))
    ) as client:
        yield client


def _spans(engine: Engine) -> list[OnlineSpan]:
    with Session(engine) as session:
        return list(session.exec(OnlineSpan.__table__.select()))  # type: ignore[attr-defined]


async def test_the_daemons_offer_carries_the_saved_selftest(devnet, http, settings, tmp_path):
    provider = Party.new(http, settings.identity, await wallet(devnet))
    provider_id = provider.wallet.key_hash.payload.hex()
    bundle = Bundle(Resources(gpus=0, cpu_cores=2, memory_mib=1024, disk_mib=1024), "", 7, 1)
    no_bond = BondView(None, 0, None)
    address = str(provider.wallet.address)
    assert "selftest" not in offer_terms(bundle, address, no_bond, load_summary(tmp_path))

    checks = [Check("engine", "pass", "27.5"), Check("gpu", "skip", "no GPU"),
              Check("limits", "fail", "pids not enforced")]  # fmt: skip
    failed = save_summary(tmp_path, checks, 1_700_000_000_000)
    terms = offer_terms(bundle, address, no_bond, load_summary(tmp_path))
    assert (await provider.send("POST", "/offers", terms)).status_code == 201
    shown = (await http.get(f"/api/explorer/providers/{provider_id}")).json()["provider"]
    assert shown["selftest"] == failed.model_dump(mode="json") and not failed.passed
    assert 'selftest-fail" data-testid="selftest"' in (await http.get("/explorer/providers")).text

    passed = save_summary(tmp_path, checks[:2], 1_700_000_100_000)
    terms = offer_terms(bundle, address, no_bond, load_summary(tmp_path))
    assert (await provider.send("POST", "/offers", terms)).status_code == 201
    assert (await provider.send("POST", "/providers/heartbeat")).status_code == 204
    page = await http.get(f"/api/explorer/providers/{provider_id}")
    assert page.json()["provider"]["selftest"]["passed"] is passed.passed is True
    spans = stored(settings, OnlineSpan, OnlineSpan.provider_id == provider_id)
    assert len(spans) == 1 and spans[0].end_ms >= spans[0].start_ms  # offer, offer, heartbeat

    lying = terms | {"selftest": terms["selftest"] | {"passed": False}}  # no check failed
    assert (await provider.send("POST", "/offers", lying)).status_code == 422
