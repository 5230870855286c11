"""Per-token billing of `kind: llm` endpoints (`offchain.protocol.job.jobspec.LlmSpec`): the
gateway reads the `usage` an OpenAI-compatible server reports in the answers it forwards and
charges `prompt_tokens x price_per_input_token + completion_tokens x price_per_output_token`.

A stream (SSE) is metered as it passes, never buffered: each event the gateway has forwarded
whole that carries `usage` (cumulative, as vLLM's `continuous_usage_stats` give it in every
chunk) moves the count, so a stream that ends early (the renter cancels it, or leaves) is billed
for the events it was sent and no more. A streaming request without those stream options gets
them added (`with_usage`): a server that ignores them reports usage only at the end, and a cut
stream of such a server is billed nothing. A whole (non-stream) answer's usage is read once it
is complete. The renter's client counts the same tokens with the model's tokenizer and signs no
IOU above its own count (`consumer.sdk.llm_meter`). The renter pays an answer's tokens with its
next request's IOU: until one covers them they are owed at the gateway (`Gateway.owe`, its 402
rule counts them), not in the book the daemon reads, whose IOUs-lag rule would stop the
endpoint between two requests; the provider risks that one answer.

A stream has an id the renter's client is told (`STREAM_HEADER`): `POST /streams/<id>/cancel`
ends it at the next event boundary, so the client reads to the end of what was sent and
counts exactly what the gateway bills (a client that just hangs up may be billed the events in
flight when the gateway noticed).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import secrets
from typing import Any

from offchain.protocol.api.sse import SseEvents

STREAM_HEADER = b"unchained-stream"
CANCEL_PREFIX = "/streams/"
STREAM_OPTIONS = {"include_usage": True, "continuous_usage_stats": True}
MAX_WHOLE_BYTES = 16 * 1024 * 1024  # a whole answer read for its usage: bigger ones bill nothing


@dataclasses.dataclass(frozen=True)
class TokenPrices:
    """Lovelace per prompt token and per completion token."""

    input: int
    output: int

    def cost(self, usage: tuple[int, int]) -> int:
        return usage[0] * self.input + usage[1] * self.output


@functools.lru_cache(maxsize=1024)
def token_prices(spec_json: str) -> TokenPrices | None:
    """The token prices of a deployment's spec (None: not an llm endpoint); read once a spec."""
    spec = json.loads(spec_json)
    if spec.get("kind") != "llm":
        return None
    return TokenPrices(int(spec.get("price_per_input_token", 0)),
                       int(spec.get("price_per_output_token", 0)))  # fmt: skip


def with_usage(body: bytes | None) -> bytes | None:
    """A streaming request's body with the stream options that make its server report usage in
    every chunk; any other body as it is (not JSON: the server's to refuse)."""
    if not body or b'"stream"' not in body:
        return body
    try:
        request = json.loads(body)
    except ValueError:
        return body
    if not isinstance(request, dict) or request.get("stream") is not True:
        return body
    options = request.get("stream_options")
    request["stream_options"] = {**(options if isinstance(options, dict) else {}),
                                 **STREAM_OPTIONS}  # fmt: skip
    return json.dumps(request).encode()


def usage_of(answer: Any) -> tuple[int, int] | None:
    """(prompt_tokens, completion_tokens) of an answer or chunk's `usage`, if it has one."""
    usage = answer.get("usage") if isinstance(answer, dict) else None
    if not isinstance(usage, dict):
        return None
    prompt, completion = usage.get("prompt_tokens", 0), usage.get("completion_tokens") or 0
    if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0
               for n in (prompt, completion)):  # fmt: skip
        return None
    return prompt, completion


class UsageMeter:
    """The usage of the answer bytes forwarded so far: `feed` each chunk once it was sent."""

    def __init__(self, streaming: bool) -> None:
        self.streaming = streaming
        self.usage = (0, 0)
        self._events = SseEvents()  # a stream's
        self._pending = b""  # a whole answer's bytes
        self._whole = 0  # ... seen

    def feed(self, chunk: bytes) -> None:
        if not self.streaming:
            self._whole += len(chunk)
            self._pending = self._pending + chunk if self._whole <= MAX_WHOLE_BYTES else b""
            return
        payloads = self._events.feed(chunk)
        last = next((p for p in reversed(payloads) if b'"usage"' in p), None)  # cumulative
        if last is not None:
            self._take(last)

    def finish(self) -> None:
        """The answer is whole: a non-stream answer's usage is read now."""
        if not self.streaming and self._pending:
            self._take(self._pending)
            self._pending = b""

    def _take(self, payload: bytes) -> None:
        try:
            usage = usage_of(json.loads(payload))
        except ValueError:
            return
        if usage is not None:
            self.usage = max(self.usage, usage)


class Streams:
    """The llm streams being forwarded, by id: `cancel(id)` marks one to end."""

    def __init__(self) -> None:
        self._cancelled: dict[str, bool] = {}

    def open(self) -> str:
        ident = secrets.token_hex(16)  # unguessable: knowing it is the right to cancel
        self._cancelled[ident] = False
        return ident

    def cancel(self, ident: str) -> bool:
        """Whether `ident` is a stream being forwarded (it ends at its next event)."""
        if ident not in self._cancelled:
            return False
        self._cancelled[ident] = True
        return True

    def cancelled(self, ident: str) -> bool:
        return self._cancelled.get(ident, False)

    def close(self, ident: str) -> None:
        self._cancelled.pop(ident, None)
