"""The gateway's TCP forwarder against a real deployment book and real sockets (an echo server
stands in for a pod's sshd): one listener per running pod at a kernel-picked port recorded in
the book, bytes piped both ways unchanged (half closes too), connections cut and the listener
closed once the pod no longer runs, nothing opened for endpoints or pending pods."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import socket
import socketserver
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from offchain.protocol.api.control import ControlRequest, SignedControl
from provider.gateway.app import gateway_app
from provider.gateway.tcp import TcpForwarder, with_tcp_forwarder
from provider.rentals.book import Rental, RentalBook
from tests.provider.test_gateway_support import NETWORK, book_with_channels, serving, stored
from tests.provider.test_gateway_support import RENTER as RENTER_KEY

CHANNEL = b"\x01" * 28
RENTER = b"\x03" * 32
T0 = 1_700_000_000_000
POD = Rental("lab", "pod", CHANNEL, RENTER, '{"kind":"pod"}', "pending", "", "", "", 0, 0, 5,
               created_ms=T0)  # fmt: skip
TIMEOUT_S = 10


async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Echo until end of stream, then say how many bytes came and close."""
    total = 0
    while chunk := await reader.read(65536):
        total += len(chunk)
        writer.write(chunk)
        await writer.drain()
    writer.write(f"\nEOF after {total}".encode())
    await writer.drain()
    writer.close()


@pytest.fixture
async def upstream() -> AsyncIterator[str]:
    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    server.close()


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while chunk := self.request.recv(65536):
            self.request.sendall(chunk)


@pytest.fixture
def upstream_thread() -> Iterator[str]:
    """An echo server in a thread of its own (the gateway runs in another's event loop)."""
    with socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        yield f"http://127.0.0.1:{server.server_address[1]}"
        server.shutdown()


@pytest.fixture
async def book(tmp_path: Path) -> AsyncIterator[RentalBook]:
    made = RentalBook.in_state_dir(tmp_path)
    yield made
    made.close()


@pytest.fixture
async def forwarder(book: RentalBook) -> AsyncIterator[TcpForwarder]:
    made = TcpForwarder(book, "127.0.0.1", poll_s=0.05)
    yield made
    await made.aclose()


def running(book: RentalBook, upstream: str, **changes: object) -> Rental:
    pod = dataclasses.replace(POD, **changes)  # type: ignore[arg-type]
    book.add(pod)
    book.set_running(pod.name, upstream, "sha256:" + "a" * 64, T0)
    return pod


async def connect(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), TIMEOUT_S)


async def test_a_running_pod_gets_a_port_recorded_in_the_book_bytes_go_both_ways(
    book, forwarder, upstream
):
    running(book, upstream)
    await forwarder.sync()
    port = forwarder.ports()["lab"]
    assert port > 0 and book.get("lab").public_port == port
    reader, writer = await connect(port)
    writer.write(b"SSH-2.0-hello\r\n")
    assert await asyncio.wait_for(reader.readexactly(15), TIMEOUT_S) == b"SSH-2.0-hello\r\n"
    payload = hashlib.sha256(b"0").digest() * (8 * 1024 * 1024 // 32)  # 8 MiB
    received = bytearray()

    async def read_all() -> None:
        while chunk := await reader.read(65536):
            received.extend(chunk)

    reading = asyncio.create_task(read_all())
    writer.write(payload)
    await writer.drain()
    writer.write_eof()  # a half close: the answer still comes back
    await asyncio.wait_for(reading, TIMEOUT_S)
    assert bytes(received) == payload + f"\nEOF after {len(payload) + 15}".encode()
    writer.close()
    await forwarder.sync()
    assert forwarder.ports() == {"lab": port}  # still running: the same listener


async def test_a_pod_that_stops_loses_its_listener_and_its_connections(book, forwarder, upstream):
    running(book, upstream)
    await forwarder.sync()
    port = forwarder.ports()["lab"]
    reader, writer = await connect(port)
    writer.write(b"ping")
    assert await asyncio.wait_for(reader.readexactly(4), TIMEOUT_S) == b"ping"
    book.finish("lab", "stopped", "its IOUs lag", T0 + 5_000)
    await forwarder.sync()
    assert forwarder.ports() == {} and book.get("lab").public_port == 0
    assert await asyncio.wait_for(reader.read(), TIMEOUT_S) == b""  # cut, nothing more
    with pytest.raises(ConnectionRefusedError):
        await connect(port)


async def test_only_running_pods_are_forwarded(book, forwarder, upstream):
    book.add(dataclasses.replace(POD, name="waiting"))  # pending: nothing to reach yet
    running(book, upstream, name="model", kind="endpoint")  # HTTP, through the gateway's routes
    running(book, upstream, name="a")
    running(book, upstream, name="b")
    await forwarder.sync()
    ports = forwarder.ports()
    assert sorted(ports) == ["a", "b"] and ports["a"] != ports["b"]
    assert book.get("waiting").public_port == book.get("model").public_port == 0
    book.remove("a")  # removed by the operator: its listener goes too
    await forwarder.sync()
    assert sorted(forwarder.ports()) == ["b"]


async def test_a_pod_that_refuses_the_connection_closes_the_renters(book, forwarder):
    probe = await asyncio.start_server(echo, "127.0.0.1", 0)
    dead = probe.sockets[0].getsockname()[1]
    probe.close()
    await probe.wait_closed()
    running(book, f"http://127.0.0.1:{dead}")
    await forwarder.sync()
    reader, writer = await connect(forwarder.ports()["lab"])
    assert await asyncio.wait_for(reader.read(), TIMEOUT_S) == b""
    writer.close()


async def test_started_it_follows_the_book_and_aclose_closes_everything(book, upstream):
    forwarder = TcpForwarder(book, "127.0.0.1", poll_s=0.05)
    forwarder.start()
    running(book, upstream)
    for _ in range(200):
        if book.get("lab").public_port:
            break
        await asyncio.sleep(0.02)
    port = book.get("lab").public_port
    assert port and forwarder.ports() == {"lab": port}
    reader, _ = await connect(port)
    await forwarder.aclose()
    assert await asyncio.wait_for(reader.read(), TIMEOUT_S) == b""
    assert book.get("lab").public_port == 0
    with pytest.raises(ConnectionRefusedError):
        await connect(port)


def test_the_real_gateway_under_uvicorn_forwards_while_it_runs(tmp_path, upstream_thread):
    """The gateway's lifespan starts and ends the forwarder (`with_tcp_forwarder`); its HTTP
    routes answer as before."""
    endpoints = RentalBook(tmp_path / "endpoints.sqlite")
    channels = book_with_channels(tmp_path / "channels.sqlite")
    app = with_tcp_forwarder(gateway_app(channels, endpoints), "127.0.0.1")
    with serving(app) as url:
        lab = stored("lab", RENTER_KEY)  # deployed by RENTER_KEY: the name is its own
        vkey = RENTER_KEY.to_verification_key().payload
        running(endpoints, upstream_thread, name=lab, renter_vkey=vkey)
        port = 0
        for _ in range(200):
            port = endpoints.get(lab).public_port
            if port:
                break
            time.sleep(0.02)
        with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S) as connection:
            connection.sendall(b"through the gateway")
            assert connection.recv(64) == b"through the gateway"
        ask = SignedControl.sign(RENTER_KEY, NETWORK, ControlRequest.of("status", "lab", CHANNEL))
        status = httpx.post(f"{url}/deployments/lab/status", json=ask.to_wire()).json()
        assert status["public_port"] == port  # shown to its renter
    assert endpoints.get(lab).public_port == 0  # the gateway stopped: so did the forwarder
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S)
    channels.close()
    endpoints.close()
