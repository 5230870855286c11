"""What the gateway's tests and benchmark share (no tests here): uvicorn serving an ASGI app on
an ephemeral port in a thread of its own, a plain upstream to proxy to, and a channel book
holding one channel of a renter whose IOUs they sign."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import uvicorn
from pycardano import PaymentSigningKey, ScriptHash

from offchain.protocol.ledger.iou import SignedIou
from offchain.protocol.tx.channel import OPEN
from provider.money.channel_book import ChannelBook, ChannelView
from provider.rentals.book import RUNNING, Rental, qualified

NETWORK = 0
SCRIPT = ScriptHash(b"\x0c" * 28)
CHANNEL, OTHER_CHANNEL = b"\x01" * 28, b"\x02" * 28
CAPACITY = 1_000_000_000  # lovelace the channel can pay in all
RENTER = PaymentSigningKey.generate()
POINT = {"slot": 100, "id": "cd" * 32}


def book_with_channels(path: Path, credit: int = 0) -> ChannelBook:
    """A book serving CHANNEL and OTHER_CHANNEL, both RENTER's, open, nothing claimed."""
    book = ChannelBook(path, NETWORK, SCRIPT, credit)
    for channel in (CHANNEL, OTHER_CHANNEL):
        book.open(ChannelView(channel, "ab" * 32 + "#0", "addr_test1channel",
                              RENTER.to_verification_key().payload, 0, CAPACITY, OPEN),
                  POINT)  # fmt: skip
    return book


def stored(name: str, renter: PaymentSigningKey = RENTER) -> str:
    """The book's name of `renter`'s deployment `name` (names are per renter)."""
    return qualified(renter.to_verification_key().payload, name)


def iou(amount: int, channel: bytes = CHANNEL) -> SignedIou:
    return SignedIou.sign(RENTER, NETWORK, SCRIPT, channel, amount)


@contextmanager
def serving(app: Any, http: Any = "auto") -> Iterator[str]:
    """`app` under uvicorn on 127.0.0.1 (an ephemeral port) until the block ends: its URL.
    `http`: uvicorn's HTTP protocol (the gateway's guarded one, `provider.gateway.guard`)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="on", http=http)
    server = uvicorn.Server(config)
    started = threading.Event()
    original = server.startup

    async def startup(sockets: list[socket.socket] | None = None) -> None:
        await original(sockets)
        started.set()

    server.startup = startup  # type: ignore[method-assign]
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    started.wait()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join()
        sock.close()


async def upstream(scope: Any, receive: Any, send: Any) -> None:
    """A plain service: `/stream?n=N` streams N lines, one per body message; `/big?n=N`
    answers N bytes; anything else echoes what it got (method, path, query, headers, body
    size and sum) as JSON."""
    if scope["type"] != "http":
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
        return
    query = dict(p.split("=", 1) for p in scope["query_string"].decode().split("&") if "=" in p)
    size = total = 0
    more = True
    while more:
        message = await receive()
        body = message.get("body", b"")
        size, total = size + len(body), total + sum(body)
        more = message.get("more_body", False)
    if scope["path"] == "/stream":
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/plain")]})  # fmt: skip
        for line in range(int(query["n"])):
            await send({"type": "http.response.body", "body": f"line {line}\n".encode(),
                        "more_body": True})  # fmt: skip
        await send({"type": "http.response.body", "body": b""})
        return
    if scope["path"] == "/big":
        data = b"x" * int(query["n"])
    else:
        data = json.dumps({
            "method": scope["method"], "path": scope["path"],
            "query": scope["query_string"].decode(),
            "headers": {k.decode(): v.decode() for k, v in scope["headers"]},
            "size": size, "sum": total,
        }).encode()  # fmt: skip
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-length", str(len(data)).encode())]})  # fmt: skip
    await send({"type": "http.response.body", "body": data})


def running(
    name: str, upstream: str, price_per_request: int, price_per_second: int = 0,
    channel: bytes = CHANNEL, started_ms: int | None = None, renter: PaymentSigningKey = RENTER,
) -> Rental:  # fmt: skip
    """An endpoint running at `upstream`, paid on `channel` by `renter`, as the daemon leaves
    one it started (billed per second from `started_ms`, now if not given)."""
    vkey = renter.to_verification_key().payload
    return Rental(
        stored(name, renter), "endpoint", channel, vkey, "{}", RUNNING, "",
        "sha256:" + "0" * 64, upstream, 0, price_per_request, price_per_second,
        created_ms=0, started_ms=time.time_ns() // 1_000_000 if started_ms is None else started_ms,
    )  # fmt: skip
