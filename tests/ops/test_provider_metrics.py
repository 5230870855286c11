"""The provider's metrics from their sources: the channel book counting the IOUs it takes and
refuses and reporting what its live channels acknowledged against what the chain paid, the
gateway's requests under route templates (no name, no path), and the local metrics server
that answers a scrape."""

from __future__ import annotations

import dataclasses

import httpx
from prometheus_client import CollectorRegistry

from devnet.process import free_port
from provider import metrics
from tests.provider.test_gateway_support import CHANNEL, OTHER_CHANNEL, book_with_channels, iou


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


def test_the_book_counts_ious_taken_and_refused_and_sums_its_channels(tmp_path):
    book = book_with_channels(tmp_path / "channels.sqlite")
    before = {o: sample(metrics.REGISTRY, "unchained_provider_channel_ious_total", outcome=o)
              for o in ("accepted", "refused")}  # fmt: skip
    book.accept(iou(3_000))
    refusals = book.accept_many([iou(2_000), iou(5_000), iou(1, b"\x09" * 28)])
    assert [type(r).__name__ for r in refusals] == ["StaleIou", "NoneType", "UnknownChannel"]
    after = {o: sample(metrics.REGISTRY, "unchained_provider_channel_ious_total", outcome=o)
             for o in ("accepted", "refused")}  # fmt: skip
    assert after["accepted"] - before["accepted"] == 2
    assert after["refused"] - before["refused"] == 2

    entry = book.get(CHANNEL)
    assert entry is not None
    book.seen(dataclasses.replace(entry.view, claimed=3_000))  # a claim of 3,000 seen on chain
    scrape = CollectorRegistry()
    scrape.register(metrics.channel_book(book))
    assert sample(scrape, "unchained_provider_channels_live") == 2
    assert sample(scrape, "unchained_provider_channel_acknowledged_lovelace") == 5_000
    assert sample(scrape, "unchained_provider_channel_claimed_lovelace") == 3_000
    book.ended(OTHER_CHANNEL)
    assert sample(scrape, "unchained_provider_channels_live") == 1
    book.close()


def test_gateway_routes_are_templates():
    route = metrics.gateway_route
    assert route({"path": "/endpoints"}) == "/endpoints"
    assert route({"path": "/endpoints/"}) == "/endpoints"
    assert route({"path": f"/endpoints/{CHANNEL.hex()}/v1/predict"}) == "/endpoints/{name}/{path}"
    assert route({"path": "/deployments/my-pod/logs"}) == "/deployments/{path}"
    assert route({"path": f"/{OTHER_CHANNEL.hex()}"}) == "unmatched"
    assert route({"path": "/endpointsX"}) == "unmatched"


def test_the_local_server_answers_a_scrape_and_refuses_a_bad_address(tmp_path):
    listen = f"127.0.0.1:{free_port()}"
    stop = metrics.serving(listen, metrics.channel_book(book_with_channels(tmp_path / "b")))
    try:
        text = httpx.get(f"http://{listen}/metrics").text
        assert "unchained_provider_channels_live 2.0" in text
        assert "# TYPE unchained_provider_container_starts_total counter" in text
        assert metrics.serving(listen)  # taken: logged, the caller goes on
    finally:
        stop()
    try:
        metrics.serving("no-port")
    except ValueError as exc:
        assert "not HOST:PORT" in str(exc)
    else:
        raise AssertionError("a listen address without a port was taken")
