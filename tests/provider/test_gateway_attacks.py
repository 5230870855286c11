"""Attacks on the gateway over raw sockets (what no client library sends), under uvicorn with
the gateway's guarded protocol, over real books on disk: one renter's slow bodies hold its own
slots and no other renter's; headers that never end, and too many connections from one
address or in all, are answered and closed; an upstream that resets the connection while the
body is sent is a 502 that charges nothing."""

from __future__ import annotations

import dataclasses
import select
import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from pycardano import PaymentSigningKey

from offchain.protocol.ledger.iou import IOU_HEADER, SignedIou
from offchain.protocol.tx.channel import OPEN
from provider.gateway import limits
from provider.gateway.app import gateway_app
from provider.gateway.guard import ConnectionLimits, guarded_protocol
from provider.money.channel_book import ChannelBook, ChannelView
from provider.rentals.book import RentalBook
from tests.provider.test_gateway_support import (
    CAPACITY,
    NETWORK,
    POINT,
    RENTER,
    SCRIPT,
    book_with_channels,
    iou,
    running,
    serving,
    stored,
)

PRICE = 1_000
VICTIM = PaymentSigningKey.generate()
VICTIM_CHANNEL = b"\x03" * 28
ENDPOINT_SLOTS, RENTER_SLOTS = 8, 12
LOOSE = ConnectionLimits(header_timeout_s=30, total=1000, per_address=1000)


@pytest.fixture
def books(tmp_path: Path, upstream_url: str) -> Iterator[tuple[ChannelBook, RentalBook]]:
    """The attacker (RENTER) with endpoints `mine` and `mine2`; the victim with `theirs`."""
    book = book_with_channels(tmp_path / "channels.sqlite")
    victim_vkey = VICTIM.to_verification_key().payload
    book.open(ChannelView(VICTIM_CHANNEL, "cd" * 32 + "#0", "addr_test1victim", victim_vkey, 0,
                          CAPACITY, OPEN), POINT)  # fmt: skip
    endpoints = RentalBook(tmp_path / "endpoints.sqlite")
    endpoints.add(running("mine", upstream_url, PRICE))
    endpoints.add(running("mine2", upstream_url, PRICE))
    endpoints.add(running("theirs", upstream_url, PRICE, channel=VICTIM_CHANNEL, renter=VICTIM))
    yield book, endpoints
    book.close()
    endpoints.close()


def open_raw(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=10)


def answer_of(sock: socket.socket, wait_s: float) -> tuple[bytes, bool]:
    """What the gateway wrote before it closed or `wait_s` passed, and whether it closed."""
    sock.settimeout(wait_s)
    got = b""
    try:
        while chunk := sock.recv(65536):
            got += chunk
    except TimeoutError:
        return got, False
    return got, True


def answered(socks: list[socket.socket], count: int, wait_s: float) -> list[socket.socket]:
    """The first `count` of `socks` the gateway wrote to (fewer if `wait_s` passes first)."""
    ready: list[socket.socket] = []
    deadline = time.monotonic() + wait_s
    while len(ready) < count and (left := deadline - time.monotonic()) > 0:
        readable, _, _ = select.select([s for s in socks if s not in ready], [], [], left)
        ready += readable
    return ready


def test_one_renters_slow_bodies_hold_its_own_slots_and_no_one_elses(
    books: tuple[ChannelBook, RentalBook], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The attack: connections on the attacker's own endpoints, each a valid IOU, declaring
    1,000 bytes of body, sending one, then silence. They hold at most its endpoint's and its
    renter's slots (the rest answered 503 at once), never an upstream connection; the
    victim's request is served meanwhile; the slow ones are cut at their body deadline with
    408, and nothing is charged."""
    monkeypatch.setattr(limits, "BODY_GRACE_S", 8.0)
    _, endpoints = books
    app = gateway_app(*books, endpoint_slots=ENDPOINT_SLOTS, renter_slots=RENTER_SLOTS)
    paid = iou(1_000 * PRICE).to_header()  # covers every request in flight: taken by each
    with serving(app, http=guarded_protocol(LOOSE)) as url:
        slow = []
        for name in ["mine"] * 10 + ["mine2"] * 6:
            sock = open_raw(url)
            sock.sendall(f"POST /endpoints/{name}/ HTTP/1.1\r\nhost: x\r\n{IOU_HEADER}: {paid}"
                         "\r\ncontent-length: 1000\r\n\r\nA".encode())  # fmt: skip
            slow.append(sock)
        refused = answered(slow, 5, 5.0)  # the refusals are written at once, the cuts at 8 s
        assert len(refused) == 4, refused  # 10 + 6 asked, 8 + 4 held
        for sock in refused:
            got, closed = answer_of(sock, 5.0)
            assert got.startswith(b"HTTP/1.1 503") and b"in flight" in got and closed, got

        victim = SignedIou.sign(VICTIM, NETWORK, SCRIPT, VICTIM_CHANNEL, PRICE).to_header()
        served = httpx.post(f"{url}/endpoints/theirs/", content=b"{}", timeout=10,
                            headers={IOU_HEADER: victim})  # fmt: skip
        assert served.status_code == 200, served.text

        held = [sock for sock in slow if sock not in refused]
        for sock in held:
            got, closed = answer_of(sock, 20.0)
            assert got.startswith(b"HTTP/1.1 408") and closed, got
            assert b"the body stopped after 1 bytes" in got
        for sock in slow:
            sock.close()
    renters = (("mine", RENTER), ("mine2", RENTER), ("theirs", VICTIM))
    assert [endpoints.get(stored(n, k)).requests for n, k in renters] == [0, 0, 1]  # type: ignore[union-attr]


@pytest.mark.parametrize("opening", [b"", b"GET /endpoints HTTP/1.1\r\nhost: x\r\nx-slow: 1\r\n"])
def test_headers_that_never_end_are_answered_408_and_closed(
    books: tuple[ChannelBook, RentalBook], opening: bytes
) -> None:
    """Slowloris: uvicorn alone would keep this connection open for good."""
    app = gateway_app(*books)
    limits_ = dataclasses.replace(LOOSE, header_timeout_s=1.0)
    with serving(app, http=guarded_protocol(limits_)) as url:
        sock = open_raw(url)
        sock.sendall(opening)
        got, closed = answer_of(sock, 10.0)
        assert got.startswith(b"HTTP/1.1 408") and b"no complete request headers" in got, got
        assert closed  # by the gateway, not left open
        sock.close()
        assert httpx.get(f"{url}/endpoints").status_code == 200  # a prompt client is served


@pytest.mark.parametrize(("bounds", "why"), [
    (dataclasses.replace(LOOSE, per_address=3), b"127.0.0.1 has 3 connections open"),
    (dataclasses.replace(LOOSE, total=3), b"3 connections are open"),
])  # fmt: skip
def test_connections_over_a_bound_are_answered_503_and_closed(
    books: tuple[ChannelBook, RentalBook], bounds: ConnectionLimits, why: bytes
) -> None:
    with serving(gateway_app(*books), http=guarded_protocol(bounds)) as url:
        kept = [open_raw(url) for _ in range(3)]
        extra = open_raw(url)
        got, closed = answer_of(extra, 5.0)
        assert got.startswith(b"HTTP/1.1 503") and why in got and closed, got
        kept.pop().close()
        for _ in range(50):  # once the close reaches the gateway, there is room again
            if httpx.get(f"{url}/endpoints", timeout=10).status_code == 200:
                break
            time.sleep(0.1)
        else:
            raise AssertionError("no room after a connection closed")
        for sock in [*kept, extra]:
            sock.close()


@pytest.fixture
def resetting_upstream() -> Iterator[str]:
    """An upstream that reads a request's head and resets the connection (the body coming)."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return  # closed: the test is over
            received = b""
            while b"\r\n\r\n" not in received:
                received += connection.recv(65536)
            connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            connection.close()  # linger 0: a reset

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    listener.close()


def test_an_upstream_that_resets_while_the_body_is_sent_is_502_and_charges_nothing(
    books: tuple[ChannelBook, RentalBook], resetting_upstream: str
) -> None:
    _, endpoints = books
    endpoints.add(running("resets", resetting_upstream, PRICE))
    with serving(gateway_app(*books), http=guarded_protocol(LOOSE)) as url:
        for _ in range(2):  # the first IOU is not charged: it pays the second request
            answer = httpx.post(f"{url}/endpoints/resets/", content=b"x" * (8 << 20), timeout=30,
                                headers={IOU_HEADER: iou(PRICE).to_header()})  # fmt: skip
            assert answer.status_code == 502, answer.text
            assert "upstream did not answer" in answer.json()["error"]
    assert endpoints.get(stored("resets")).requests == 0  # type: ignore[union-attr]
