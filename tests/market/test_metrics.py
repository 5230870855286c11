"""The market's /metrics over real HTTP, read back with Prometheus's own parser: requests under
their route templates (never a job id or a raw path) with their statuses, jobs and settle
transactions by state from the database, the probes' gauges, and a settle batch counted (its
escrows, its fee to the lovelace, the time from receipt to confirmation)."""

from __future__ import annotations

import json

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from pycardano import Transaction

from offchain.market.models import JobState, Settlement
from tests.market.client import serve
from tests.market.database import served_at_head
from tests.market.flow import (
    deliver,
    leader_settings,
    provider_with_offer,
    quote_and_lock,
    stored,
    wait_for,
)

ONE_DATABASE = pytest.mark.parametrize(
    "database_url", [""], ids=["sqlite"]
)  # the counts are plain SQL


async def scrape(http: httpx.AsyncClient) -> dict[tuple[str, tuple], float]:
    """Every sample: (name, sorted labels) -> value."""
    answer = await http.get("/metrics")
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain; version=0.0.4")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(answer.text)
        for sample in family.samples
    }


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


@ONE_DATABASE
async def test_requests_are_counted_by_route_template_and_status(settings):
    job_id = "0123456789abcdef0123456789abcdef"
    with serve(served_at_head(settings)) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            before = await scrape(http)
            assert (await http.get(f"/jobs/{job_id}")).status_code == 401  # unsigned
            assert (await http.get(f"/no/{job_id}")).status_code == 404
            big = b"x" * (settings.body_limit_bytes + 1)
            assert (await http.post("/offers", content=big)).status_code == 413
            after = await scrape(http)
    counted = "unchained_market_http_requests_total"
    for labels in ({"method": "GET", "route": "/jobs/{job_id}", "status": "401"},
                   {"method": "GET", "route": "unmatched", "status": "404"},
                   {"method": "POST", "route": "unmatched", "status": "413"}):  # fmt: skip
        assert value(after, counted, **labels) - value(before, counted, **labels) == 1, labels
    timed = "unchained_market_http_request_duration_seconds_count"
    assert value(after, timed, method="GET", route="/jobs/{job_id}") >= 1
    labels = {v for (_, pairs) in after for _, v in pairs}
    assert not any(job_id in label for label in labels)  # no id became a label
    for state in JobState:
        assert ("unchained_market_jobs", (("state", state.value),)) in after
    assert value(after, "unchained_market_dependency_up", dependency="database") == 1
    assert value(after, "unchained_market_dependency_up", dependency="chain") == 1


@ONE_DATABASE
async def test_a_settle_batch_is_counted(devnet, market_deployment, settings, tmp_path):
    settings, _ = await leader_settings(settings, devnet, tmp_path)
    with serve(settings) as url:
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            before = await scrape(http)
            provider = await provider_with_offer(devnet, http, settings.identity)
            deal = await quote_and_lock(devnet, market_deployment, http, settings.identity)
            await wait_for(deal.consumer, deal.job, "funded")
            await deliver(provider, market_deployment, deal)
            await wait_for(deal.consumer, deal.job, "settled")
            after = await scrape(http)
    (settled,) = stored(settings, Settlement)
    assert json.loads(settled.escrows) == [deal.ref]
    fee = Transaction.from_cbor(bytes.fromhex(settled.tx_cbor)).transaction_body.fee

    def grew(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert grew("unchained_market_settle_batch_escrows_count") == 1
    assert grew("unchained_market_settle_batch_escrows_sum") == 1
    assert grew("unchained_market_settle_fee_lovelace_total") == fee
    assert grew("unchained_market_settle_latency_seconds_count") == 1
    assert value(after, "unchained_market_settle_transactions", state="confirmed") == 1
    assert value(after, "unchained_market_jobs", state="settled") == 1
    assert value(after, "unchained_market_leader") == 1
    assert value(after, "unchained_market_wallet_lovelace") > 0
    assert ("unchained_market_follower_lag_blocks", ()) in after
