"""The renter's own count of an llm endpoint's tokens (`kind: llm`), from what it sent and
what it received, with the model's tokenizer (for the sample model: `samples.llm_tokens`, the
module its server imports too). The renter signs IOUs against this count, never against the
server's or the gateway's `usage`: a provider that reports more is refused.

`Tally` reads one answer as it arrives (`feed`): a stream's SSE events, each complete event's
text counted (`choices[].delta.content` or `choices[].text`); a whole answer's text once it is
complete. Its `cost` is what that answer is worth at the endpoint's prices.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Protocol

from offchain.protocol.api.sse import SseEvents


class Tokenizer(Protocol):
    """What the renter counts tokens with: the model's own tokenizer."""

    def prompt_tokens(self, path: str, body: dict[str, Any]) -> int: ...

    def completion_tokens(self, text: str) -> int: ...


@dataclasses.dataclass(frozen=True)
class LlmPrices:
    """An llm endpoint's prices, lovelace: per input token, per output token, per request."""

    input: int
    output: int
    request: int = 0

    @classmethod
    def of_spec(cls, spec: dict[str, Any]) -> LlmPrices:
        return cls(int(spec.get("price_per_input_token", 0)),
                   int(spec.get("price_per_output_token", 0)),
                   int(spec.get("price_per_request", 0)))  # fmt: skip


class Tally:
    """One answer's tokens by the renter's count: the prompt's (known when sent) and the text
    received so far."""

    def __init__(self, tokenizer: Tokenizer, path: str, body: bytes, streaming: bool) -> None:
        self.tokenizer, self.streaming = tokenizer, streaming
        try:
            request = json.loads(body) if body else {}
            self.prompt = tokenizer.prompt_tokens(path, request) if isinstance(request, dict) else 0
        except ValueError:  # the server refuses it: no tokens
            self.prompt = 0
        self.completion = 0
        self._events = SseEvents()  # a stream's
        self._pending = b""  # a whole answer's

    def feed(self, chunk: bytes) -> None:
        if not self.streaming:
            self._pending += chunk
            return
        for payload in self._events.feed(chunk):
            if payload != b"[DONE]":
                self._count(payload)

    def finish(self) -> None:
        """The answer is whole: a non-stream answer's text is counted now."""
        if not self.streaming and self._pending:
            self._count(self._pending)
        self._pending = b""

    def cost(self, prices: LlmPrices) -> int:
        return self.prompt * prices.input + self.completion * prices.output + prices.request

    def _count(self, payload: bytes) -> None:
        try:
            answer = json.loads(payload)
        except ValueError:
            return
        choices = answer.get("choices") if isinstance(answer, dict) else None
        for choice in choices if isinstance(choices, list) else ():
            if not isinstance(choice, dict):
                continue
            part = choice.get("delta") or choice.get("message") or {}
            text = part.get("content") if isinstance(part, dict) else None
            text = choice.get("text") if text is None else text
            if isinstance(text, str):
                self.completion += self.tokenizer.completion_tokens(text)
