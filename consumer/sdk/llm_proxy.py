"""The renter's local OpenAI-compatible endpoint for an llm endpoint (`kind: llm`) behind a
provider's gateway: any OpenAI client works unchanged against it, given its `url` as base URL
(and any API key: the proxy ignores it).

    with LlmProxy(gateway_url, "chat", signer, LlmPrices(2, 5), samples.llm_tokens) as proxy:
        client = openai.OpenAI(base_url=proxy.url, api_key="unchained")
        client.chat.completions.create(model="unchained-gpt", messages=[...])

Why a proxy on the renter's machine, not the gateway taking a key: every request is paid by an
IOU the renter signs with its channel key, which must never leave its machine, and the renter
signs only what it counted itself (`consumer.sdk.llm_meter`): both need the renter's side of the
wire, which a bearer key handed to the provider cannot give.

Paying: a request carries an IOU for everything received so far (by the renter's count) plus
the endpoint's price per request; the tokens of an answer are owed once it is read, and paid by
the next request's IOU (or `settle`). A 402 asking for more is paid only up to the renter's own
count once its requests in flight are read; above it the proxy answers the client 402 itself,
signs nothing, and keeps the dispute in `disputes`. A stream the client closes is cancelled at
the gateway (`POST /streams/<id>/cancel`) and read to its end, so the renter counts exactly the
events the gateway sent, and bills.
"""

from __future__ import annotations

import contextlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

import httpx

from consumer.sdk.errors import ConsumerError
from consumer.sdk.llm_meter import LlmPrices, Tally, Tokenizer
from offchain.protocol.ledger.amounts import ada
from offchain.protocol.ledger.iou import IOU_HEADER

if TYPE_CHECKING:
    from consumer.sdk.iou_signer import IouSigner

PAYMENT_REQUIRED = 402
STREAM_HEADER = "unchained-stream"
KEPT_HEADERS = ("content-type", "cache-control", STREAM_HEADER)  # what the client is told
TIMEOUT = httpx.Timeout(300.0, connect=10.0)  # a completion may take minutes
MAX_BODY = 16 * 1024 * 1024


class LlmProxy:
    """The local endpoint (`url`, on `port`: 0 picks a free one) paying one llm endpoint's
    requests on `signer`'s channel.

    `received`: lovelace the renter counted (every answer read, at `prices`), starting from the
    channel's last IOU; `disputes`: the gateway's asks the renter refused."""

    def __init__(
        self, gateway_url: str, endpoint: str, signer: IouSigner, prices: LlmPrices,
        tokenizer: Tokenizer, client: httpx.Client | None = None, port: int = 0,
    ) -> None:  # fmt: skip
        self.gateway = gateway_url.rstrip("/")
        self.endpoint, self.signer = endpoint, signer
        self.prices, self.tokenizer = prices, tokenizer
        self.client = client or httpx.Client(timeout=TIMEOUT)
        self.received = signer.signed
        self.in_flight = 0
        self.changed = threading.Condition()  # received or in_flight changed
        self.disputes: list[str] = []
        handler = type("Handler", (_Handler,), {"proxy": self})
        self.server = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self.server.daemon_threads = True
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        """The OpenAI base URL: http://127.0.0.1:PORT/v1."""
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> LlmProxy:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.client.close()

    def counted(self) -> int:
        """`received` once every answer in flight is read (a stream's client may stop at its
        `[DONE]` a moment before the proxy has read the end)."""
        with self.changed:
            self.changed.wait_for(lambda: self.in_flight == 0)
            return self.received

    def settle(self) -> int:
        """Pay the gateway everything received (the last answer's tokens included): the IOU's
        amount. ConsumerError if the gateway refuses it (it counts more)."""
        amount = self.counted()
        iou = self.signer.pay(max(amount, self.signer.signed), amount)
        url = f"{self.gateway}/deployments/{self.endpoint}/pay"
        answer = self.client.post(url, headers={IOU_HEADER: iou.to_header()})
        if answer.status_code != 200:
            raise ConsumerError(f"POST {url}: {answer.status_code}: {answer.text[:200]}",
                                status=answer.status_code)  # fmt: skip
        return amount

    def forward(self, handler: _Handler, body: bytes) -> None:
        """One request of the local client, paid and forwarded, its answer streamed back."""
        path = handler.path
        url = f"{self.gateway}/endpoints/{self.endpoint}{path}"
        headers = {"content-type": handler.headers.get("content-type", "application/json")}
        with self.changed:
            self.in_flight += 1
            amount = self.received + self.prices.request
        counted, listening = 0, False
        try:
            iou = self.signer.pay(max(amount, self.signer.signed), amount)
            request = self.client.build_request(
                handler.command,
                url,
                content=body or None,
                headers={**headers, IOU_HEADER: iou.to_header()},
            )
            answer = self.client.send(request, stream=True)
            if answer.status_code == PAYMENT_REQUIRED:
                answer.read()
                answer.close()
                iou_header = self._agreed(answer)
                if iou_header is None:
                    return handler.refuse(self.disputes[-1])
                request.headers[IOU_HEADER] = iou_header
                answer = self.client.send(request, stream=True)
            counted, listening = self._relay(handler, answer, Tally(self.tokenizer, path, body,
                                  answer.headers.get("content-type", "").startswith(
                                      "text/event-stream")))  # fmt: skip
        finally:
            with self.changed:
                self.received += counted
                self.in_flight -= 1
                self.changed.notify_all()
        if listening:  # the answer ends once counted: the client's next step sees the count
            handler.chunk(b"")

    def _agreed(self, answer: httpx.Response) -> str | None:
        """The IOU header for a 402's due once the requests in flight are read, if it is no
        more than the renter counted (None: refused, kept in `disputes`)."""
        try:
            due = int(answer.json()["due"])
        except (ValueError, KeyError, TypeError):
            due = -1
        with self.changed:
            self.in_flight -= 1
            self.changed.wait_for(lambda: self.in_flight == 0)
            self.in_flight += 1
            ceiling = self.received + self.prices.request
        if not 0 <= due <= ceiling:
            self.disputes.append(
                f"{self.endpoint}: the gateway asks for {ada(due)} in all, more than the "
                f"{ada(ceiling)} counted here ({ada(self.received)} received by this renter's "
                "own count of tokens, plus this request): not signed"
            )
            return None
        return self.signer.pay(max(due, self.signer.signed), ceiling).to_header()

    def _relay(self, handler: _Handler, answer: httpx.Response, tally: Tally) -> tuple[int, bool]:
        """Stream `answer` to the local client but its end, counting it: its worth (0 for an
        error) and whether the client still listens."""
        stream = answer.headers.get(STREAM_HEADER)
        handler.send_response(answer.status_code)
        for name in KEPT_HEADERS:
            if name in answer.headers:
                handler.send_header(name, answer.headers[name])
        handler.send_header("transfer-encoding", "chunked")
        handler.end_headers()
        listening = True
        try:
            for chunk in answer.iter_bytes():
                if listening:
                    listening = handler.chunk(chunk)
                    if not listening and stream:  # the client left: the gateway stops the stream
                        self.client.post(f"{self.gateway}/streams/{stream}/cancel")
                tally.feed(chunk)
        finally:
            answer.close()
        tally.finish()
        return (tally.cost(self.prices) if answer.status_code < 400 else 0), listening


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # a stream's events go out as they come
    proxy: LlmProxy

    def handle(self) -> None:
        with contextlib.suppress(ConnectionError):  # the client hung up between requests
            super().handle()

    def do_GET(self) -> None:
        self.proxy.forward(self, b"")

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        if not 0 <= length <= MAX_BODY:
            self.refuse(f"a body is at most {MAX_BODY} bytes", 413)
            return
        self.proxy.forward(self, self.rfile.read(length))

    def chunk(self, data: bytes) -> bool:
        """Send `data` as one chunk; whether the client is still there."""
        try:
            self.wfile.write(b"%x\r\n%b\r\n" % (len(data), data))
            self.wfile.flush()
            return True
        except OSError:
            self.close_connection = True
            return False

    def refuse(self, reason: str, status: int = PAYMENT_REQUIRED) -> None:
        body = json.dumps({"error": {"message": reason, "type": "payment_disputed"}}).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the renter's program owns the terminal."""
