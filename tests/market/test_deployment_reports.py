"""A provider's report of its endpoints and pods (`POST /providers/deployments`), on SQLite and
PostgreSQL over real HTTP: rows are stored and move forward only (pending -> running ->
stopped | failed, counters never down, what the renter signed never changed), a report is
bounded in rows and sizes, signed by a provider with an offer, and refused whole for a channel
the index says pays another provider; the explorer lists what was stored."""

from __future__ import annotations

from typing import Any

from sqlmodel import Session, func, select

from offchain.market.db import make_engine
from offchain.market.models import Channel, ChannelState, Rental
from offchain.market.services.offers import key_hash
from offchain.protocol.api.rental_report import MAX_DEPLOYMENTS, MAX_REASON, REPORT_PATH
from tests.market.client import Party
from tests.market.test_bad_input import refused
from tests.market.test_lifecycle import offer_terms

CHANNEL = "c1" * 28
OTHERS = "c2" * 28  # a channel the index holds, paying another provider
START_MS = 1_700_000_000_000


def row(name: str, **changes: Any) -> dict[str, Any]:
    """A deployment as a book holds it: an endpoint, pending, on CHANNEL."""
    return {
        "name": name, "kind": "endpoint", "channel": CHANNEL, "image_digest": "", "state":
        "pending", "reason": "", "price_per_request": 1_000, "price_per_second": 0,
        "created_ms": START_MS, "started_ms": 0, "stopped_ms": 0, "requests": 0, "served": 0,
        "seconds_run": 0, **changes,
    }  # fmt: skip


RUNNING = {"state": "running", "image_digest": "sha256:" + "ab" * 32, "started_ms": START_MS + 900}
SERVED = {"requests": 7, "served": 7_000, "seconds_run": 2}


def stored(settings) -> list[tuple]:
    with Session(make_engine(settings)) as session:
        rows = session.exec(select(Rental).order_by(Rental.name)).all()
        return [(d.name, d.state, d.requests, d.served, d.seconds_run) for d in rows]


async def report(party: Party, *rows: dict[str, Any]):
    return await party.send("POST", REPORT_PATH, {"deployments": list(rows)})


async def test_a_report_is_stored_and_moves_forward_only(http, settings):
    provider = Party.new(http, settings.identity)
    refused(await report(provider, row("a")), 404, "provider")  # no offer yet
    assert (await provider.send("POST", "/offers", offer_terms(provider))).status_code == 201
    pod = row("shell", kind="pod", price_per_request=0, price_per_second=50, **RUNNING,
              seconds_run=3)  # fmt: skip
    answer = await report(provider, row("a"), pod)
    assert answer.status_code == 200 and answer.json() == {"deployments": 2}, answer.text
    assert stored(settings) == [("a", "pending", 0, 0, 0), ("shell", "running", 0, 0, 3)]
    served = row("a", **RUNNING, **SERVED)
    assert (await report(provider, served)).status_code == 200
    assert (await report(provider, served)).status_code == 200  # the same again: nothing moves

    for step, why in [
        (row("a", **RUNNING | {"state": "pending"}), "state running cannot become pending"),
        (row("a", **RUNNING, **SERVED | {"requests": 6}), "requests went down"),
        (row("a", **RUNNING, **SERVED | {"served": 6_000}), "served went down"),
        (row("a", **RUNNING, **SERVED | {"seconds_run": 1}), "seconds_run went down"),
        (row("a", **RUNNING | {"started_ms": START_MS + 1}, **SERVED), "started_ms changed"),
        (row("a", **RUNNING, **SERVED, price_per_request=1), "price_per_request changed"),
        (row("a", **RUNNING, **SERVED, kind="pod"), "kind changed"),
        (row("a", **RUNNING, **SERVED, channel=OTHERS), "channel changed"),
    ]:  # fmt: skip
        # refused whole: the pod's row beside it is not stored either
        answer = await report(provider, pod | {"seconds_run": 9}, step)
        refused(answer, 409, "deployments")
        assert why in answer.json()["detail"][0]["msg"], answer.text
    assert stored(settings) == [("a", "running", 7, 7_000, 2), ("shell", "running", 0, 0, 3)]

    stopped = pod | {"state": "stopped", "stopped_ms": START_MS + 5_000, "seconds_run": 4}
    assert (await report(provider, stopped)).status_code == 200
    refused(await report(provider, stopped | {"state": "failed"}), 409, "deployments")
    refused(await report(provider, stopped | {"state": "running"}), 409, "deployments")
    # the name again, later: another deployment
    again = row("shell", created_ms=START_MS + 60_000)
    assert (await report(provider, again)).status_code == 200

    listed = (await http.get("/api/explorer/deployments", params={"kind": "pod"})).json()
    assert [(d["name"], d["state"], d["lovelace"]) for d in listed["deployments"]] == [
        ("shell", "stopped", 200)
    ]  # fmt: skip
    assert listed["deployments"][0]["provider_id"] == key_hash(provider.wallet.vkey)
    home = (await http.get("/api/explorer")).json()
    assert home["deployments"] == {"running": 1, "stopped": 1, "pending": 1}


async def test_bounds_signatures_and_other_providers_channels_are_refused(http, settings):
    provider, other = (Party.new(http, settings.identity) for _ in range(2))
    for party in (provider, other):
        assert (await party.send("POST", "/offers", offer_terms(party))).status_code == 201
    with Session(make_engine(settings)) as session:
        session.add(Channel(
            id=OTHERS, renter="addr_test1", renter_vkey="01" * 32, provider="addr_test1",
            provider_vkey=other.wallet.vkey.hex(), provider_id=key_hash(other.wallet.vkey),
            close_period_ms=1, nonce="ab#0", open_tx="ab" * 32, opened_slot=1, ref=None,
            state=ChannelState.OPEN, funded=5, claimed=0, lovelace=5,
        ))  # fmt: skip
        session.commit()
    # the other provider's channel, named by this one: 403, nothing stored
    answer = await report(provider, row("mine"), row("theirs", channel=OTHERS))
    refused(answer, 403, "channel")
    assert (await report(other, row("theirs", channel=OTHERS))).status_code == 200

    many = [row(f"e{i}") for i in range(MAX_DEPLOYMENTS + 1)]
    refused(await report(provider, *many), 422, "deployments")
    for bad, field in [
        (row("a", reason="x" * (MAX_REASON + 1)), "reason"),
        (row("a", reason="a\x00b"), "reason"),
        (row("a", requests=-1), "requests"),
        (row("a", served=10**30), "served"),
        (row("a", created_ms=10**18), "created_ms"),
        (row("a", state="paused"), "state"),
        (row("a", kind="batch"), "kind"),
        (row("a/b"), "name"),
        (row("a", channel="C1" * 28), "channel"),
        (row("a", image_digest="sha256: spaced"), "image_digest"),
        (row("a") | {"extra": 1}, "extra"),
    ]:  # fmt: skip
        refused(await report(provider, bad), 422, field)
    refused(await report(provider, row("a"), row("a")), 409, "deployments")  # named twice
    unsigned = await http.post(REPORT_PATH, json={"deployments": [row("a")]})
    assert unsigned.status_code == 401, unsigned.text
    assert (await report(provider, *many[:MAX_DEPLOYMENTS])).status_code == 200
    with Session(make_engine(settings)) as session:
        count = select(func.count()).select_from(Rental)
        assert session.exec(count).one() == MAX_DEPLOYMENTS + 1  # and the other's one
