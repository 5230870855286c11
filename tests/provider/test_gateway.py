"""The gateway in front of a real uvicorn upstream, itself under uvicorn, a real channel book
and endpoint book on disk (no chain: the channel is opened in the book directly): the 402 rule
(no IOU, malformed, another channel's, stale, not covering served + price), requests paid and
proxied (method, path, query, headers, body both ways, streamed), usage recorded, the IOU
stored before the answer, the bounds on bodies, an unknown endpoint, and the listing."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from offchain.protocol.ledger.iou import IOU_HEADER
from provider.gateway.app import gateway_app
from provider.money.channel_book import ChannelBook
from provider.rentals.book import RentalBook
from tests.provider.test_gateway_support import (
    CHANNEL,
    OTHER_CHANNEL,
    book_with_channels,
    iou,
    running,
    serving,
    stored,
)

PRICE = 1_000
MAX_BODY = 64 * 1024


@pytest.fixture
def books(tmp_path: Path, upstream_url: str) -> Iterator[tuple[ChannelBook, RentalBook]]:
    book = book_with_channels(tmp_path / "channels.sqlite")
    endpoints = RentalBook(tmp_path / "endpoints.sqlite")
    endpoints.add(running("echo", upstream_url, PRICE))
    yield book, endpoints
    book.close()
    endpoints.close()


@pytest.fixture
def gateway(books: tuple[ChannelBook, RentalBook]) -> Iterator[httpx.Client]:
    app = gateway_app(*books, max_request_bytes=MAX_BODY, max_response_bytes=MAX_BODY)
    with serving(app) as url, httpx.Client(base_url=url) as client:
        yield client


def paid(amount: int, channel: bytes = CHANNEL) -> dict[str, str]:
    return {IOU_HEADER: iou(amount, channel).to_header()}


def assert_402(response: httpx.Response, due: int, error: str) -> None:
    assert response.status_code == 402, response.text
    body = response.json()
    assert body == {"error": body["error"], "due": due, "channel": CHANNEL.hex(), "price": PRICE}
    assert error in body["error"]
    assert response.headers["unchained-due"] == str(due)


def test_requests_paid_by_iou_are_proxied_charged_and_their_ious_stored(
    gateway: httpx.Client, books: tuple[ChannelBook, RentalBook]
) -> None:
    book, endpoints = books
    for n in (1, 2, 3):
        response = gateway.post("/endpoints/echo/predict/v1?x=1&y=2", content=b"\x01\x02\x03",
                                headers={**paid(n * PRICE), "X-Model": "tiny"})  # fmt: skip
        assert response.status_code == 200, response.text
        echoed = response.json()
        assert (echoed["method"], echoed["path"], echoed["query"]) == ("POST", "/predict/v1",
                                                                       "x=1&y=2")  # fmt: skip
        assert (echoed["size"], echoed["sum"]) == (3, 6)
        assert echoed["headers"]["x-model"] == "tiny"
        assert IOU_HEADER.lower() not in echoed["headers"]  # the IOU stays with the gateway
        entry = book.get(CHANNEL)
        assert entry is not None and entry.iou is not None and entry.iou.amount == n * PRICE
    endpoint = endpoints.get(stored("echo"))
    assert endpoint is not None and (endpoint.requests, endpoint.served) == (3, 3 * PRICE)


def test_a_path_reaches_the_upstream_as_the_renter_encoded_it(gateway: httpx.Client) -> None:
    response = gateway.get("/endpoints/echo/a%20b%3Fc%25d/%C3%A9?q=%20x", headers=paid(PRICE))
    assert response.status_code == 200, response.text
    assert (response.json()["path"], response.json()["query"]) == ("/a b?c%d/\u00e9", "q=%20x")


def test_402_without_an_iou_and_with_a_malformed_one(gateway: httpx.Client) -> None:
    assert_402(gateway.get("/endpoints/echo/"), PRICE, f"no {IOU_HEADER} header")
    for bad, why in ((f"{CHANNEL.hex()}:12", "CHANNEL_HEX:AMOUNT:SIGNATURE_HEX"),
                     (f"{CHANNEL.hex()}:-5:{'00' * 64}", "amount"),
                     (f"{CHANNEL.hex()}:5:{'zz' * 64}", "hex"),
                     ("x" * 5000, "at most")):  # fmt: skip
        assert_402(gateway.get("/endpoints/echo/", headers={IOU_HEADER: bad}), PRICE, why)


def test_402_for_an_iou_below_served_plus_price_and_for_another_channels(
    gateway: httpx.Client, books: tuple[ChannelBook, RentalBook]
) -> None:
    assert gateway.get("/endpoints/echo/", headers=paid(PRICE)).status_code == 200
    assert_402(gateway.get("/endpoints/echo/", headers=paid(PRICE)), 2 * PRICE,
               f"does not cover the {2 * PRICE} due")  # fmt: skip
    assert_402(gateway.get("/endpoints/echo/", headers=paid(2 * PRICE, OTHER_CHANNEL)),
               2 * PRICE, f"endpoint echo is paid on channel {CHANNEL.hex()}")  # fmt: skip
    assert books[0].get(OTHER_CHANNEL).iou is None  # type: ignore[union-attr]
    assert gateway.get("/endpoints/echo/", headers=paid(2 * PRICE)).status_code == 200


def test_402_for_a_stale_iou_and_a_forged_one(
    gateway: httpx.Client, books: tuple[ChannelBook, RentalBook]
) -> None:
    book, endpoints = books
    book.accept(iou(10 * PRICE))  # the renter signed ahead (another session of its own)
    assert_402(gateway.get("/endpoints/echo/", headers=paid(5 * PRICE)), PRICE,
               f"below the {10 * PRICE} already acknowledged")  # fmt: skip
    forged = iou(20 * PRICE)
    header = f"{CHANNEL.hex()}:{30 * PRICE}:{forged.signature.hex()}"
    assert_402(gateway.get("/endpoints/echo/", headers={IOU_HEADER: header}), PRICE,
               "not signed by its renter")  # fmt: skip
    assert book.get(CHANNEL).iou.amount == 10 * PRICE  # type: ignore[union-attr]
    assert endpoints.get(stored("echo")).requests == 0  # type: ignore[union-attr]


def test_a_closing_channel_is_served_no_more(
    gateway: httpx.Client, books: tuple[ChannelBook, RentalBook]
) -> None:
    book, _ = books
    entry = book.get(CHANNEL)
    assert entry is not None
    book.seen(dataclasses.replace(entry.view, closing_at=1))
    assert_402(gateway.get("/endpoints/echo/", headers=paid(PRICE)), PRICE, "closing")


def test_an_unknown_endpoint_and_route_are_404(gateway: httpx.Client) -> None:
    response = gateway.get("/endpoints/nope/x", headers=paid(PRICE))
    assert response.status_code == 404 and "no endpoint named 'nope'" in response.json()["error"]
    assert gateway.get("/elsewhere").status_code == 404


def test_oversized_bodies_are_refused_whatever_their_framing(
    gateway: httpx.Client, books: tuple[ChannelBook, RentalBook]
) -> None:
    book, endpoints = books
    big = b"\x01" * (MAX_BODY + 1)
    declared = gateway.post("/endpoints/echo/", content=big, headers=paid(PRICE))
    assert declared.status_code == 413 and "65537 bytes" in declared.json()["error"]
    assert book.get(CHANNEL).iou is None  # type: ignore[union-attr]  # refused before the IOU

    def chunks() -> Iterator[bytes]:  # no Content-Length: chunked transfer encoding
        for start in range(0, len(big), 4096):
            yield big[start : start + 4096]

    chunked = gateway.post("/endpoints/echo/", content=chunks(), headers=paid(PRICE))
    assert chunked.status_code == 413, chunked.text
    assert endpoints.get(stored("echo")).requests == 0  # type: ignore[union-attr]  # not charged
    exact = gateway.post("/endpoints/echo/", content=big[:MAX_BODY], headers=paid(PRICE))
    assert exact.status_code == 200 and exact.json()["size"] == MAX_BODY


def test_oversized_answers_are_not_passed_on(gateway: httpx.Client) -> None:
    response = gateway.get(f"/endpoints/echo/big?n={MAX_BODY + 1}", headers=paid(PRICE))
    assert response.status_code == 502 and "above the gateway's" in response.json()["error"]
    fits = gateway.get(f"/endpoints/echo/big?n={MAX_BODY}", headers=paid(PRICE))
    assert fits.status_code == 200 and len(fits.content) == MAX_BODY, fits.text


def test_answers_are_streamed(gateway: httpx.Client) -> None:
    lines = []
    with gateway.stream("GET", "/endpoints/echo/stream?n=50", headers=paid(PRICE)) as response:
        assert response.status_code == 200
        assert "content-length" not in response.headers  # passed on chunked, as it came
        lines = list(response.iter_lines())
    assert lines == [f"line {n}" for n in range(50)]


def test_an_upstream_that_does_not_answer_is_not_charged(
    tmp_path: Path, books: tuple[ChannelBook, RentalBook]
) -> None:
    book, endpoints = books
    endpoints.add(running("gone", "http://127.0.0.1:9", PRICE))
    with serving(gateway_app(book, endpoints)) as url:
        response = httpx.get(f"{url}/endpoints/gone/", headers=paid(PRICE))
        assert response.status_code == 502 and "upstream did not answer" in response.text
        assert endpoints.get(stored("gone")).served == 0  # type: ignore[union-attr]
        # the IOU stored pays the next request: the same amount is due again
        assert httpx.get(f"{url}/endpoints/echo/", headers=paid(PRICE)).status_code == 200


def test_the_listing_shows_names_and_prices_only(gateway: httpx.Client) -> None:
    assert gateway.get("/endpoints").json() == [
        {"name": "echo", "price_per_request": PRICE, "price_per_second": 0}
    ]
