"""A TEST DOUBLE of the provider's gateway (provider/gateway/app.py), not the gateway: a tiny ASGI
app served by a real uvicorn on a free port, implementing only what the renter's SDK relies on
(the design's 402 rule, GET /endpoints) for one endpoint on one channel, so the client's
payment logic is tested over real HTTP without the provider's channel book. Its "service"
echoes the request as JSON; `/missing` is its 404 and `/fail` its 500 (answered: charged),
`/down` the gateway's own 502 for an upstream that did not answer (not charged), and `/hold`
keeps its answer until the double has sent a 402 (two requests in flight, in order)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn
from pycardano import ScriptHash

from devnet.process import free_port
from offchain.protocol.ledger.iou import SignedIou

Scope = dict[str, Any]


class GatewayDouble:
    """One endpoint `name` at `price` lovelace a request on `channel`, whose IOUs `vkey` signs.
    `served` is what it counts as served (a test may raise it to play a greedy gateway)."""

    def __init__(self, vkey: bytes, network_id: int, channel_hash: ScriptHash, channel: bytes,
                 price: int, name: str = "echo") -> None:  # fmt: skip
        self.vkey, self.network_id, self.channel_hash = vkey, network_id, channel_hash
        self.channel, self.price, self.name = channel, price, name
        self.served = 0
        self.ious: list[SignedIou] = []  # every IOU it accepted, in order
        self.refusals: list[dict[str, Any]] = []  # every 402 body it sent
        self.holding = threading.Event()  # a /hold request is waiting
        self.refused = asyncio.Event()  # a 402 was sent: /hold answers

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        path, prefix = scope["path"], f"/endpoints/{self.name}/"
        if path == "/endpoints" and scope["method"] == "GET":
            listed = {"name": self.name, "price_per_request": self.price, "price_per_second": 0}
            return await answer(send, 200, [listed])
        if not path.startswith(prefix):
            return await answer(send, 404, {"error": f"no endpoint at {path}"})
        refusal = self.check(dict(scope["headers"]).get(b"unchained-iou", b"").decode())
        if refusal is not None:
            self.refusals.append(refusal)
            self.refused.set()
            return await answer(send, 402, refusal, ((b"unchained-due", b"%d" % refusal["due"]),))
        what = path.removeprefix(prefix)
        if what == "down":
            return await answer(send, 502, {"error": "upstream did not answer"})
        self.served += self.price
        if what in ("missing", "fail"):
            status = 404 if what == "missing" else 500
            return await answer(send, status, {"error": f"the service answered {status}"})
        if what == "hold":
            self.holding.set()
            await asyncio.wait_for(self.refused.wait(), timeout=60)
        echoed = {"method": scope["method"], "path": what, "body": body.decode()}
        return await answer(send, 200, echoed)

    def check(self, header: str) -> dict[str, Any] | None:
        """The design's 402 rule: None when the IOU pays for served + price, else the body."""
        due = self.served + self.price
        error = None
        try:
            iou = SignedIou.from_header(header)
        except ValueError as exc:
            error = f"no valid IOU ({exc})"
        else:
            if iou.channel != self.channel:
                error = "another channel's IOU"
            elif not iou.signed_by(self.vkey, self.network_id, self.channel_hash):
                error = "the IOU is not signed by the channel's renter key"
            elif iou.amount < due:
                error = f"the IOU pays {iou.amount}, {due} is due"
            else:
                self.ious.append(iou)
        if error is None:
            return None
        return {"error": error, "due": due, "channel": self.channel.hex(), "price": self.price}


async def answer(
    send: Any, status: int, body: Any, headers: tuple[tuple[bytes, bytes], ...] = ()
) -> None:
    raw = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), *headers]})  # fmt: skip
    await send({"type": "http.response.body", "body": raw})


@contextmanager
def serving(app: Any) -> Iterator[str]:
    """`app` under uvicorn on a free local port, in a thread, for the duration; its base URL."""
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
