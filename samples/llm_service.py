"""The sample OpenAI-compatible inference server: `samples/llm_model.py`'s transformer behind
the routes vLLM serves, what `images.llm_service_image` runs (the CPU path here; on a GPU
machine the renter names vLLM's image and the same client flow works).

- `GET /health`: 200 once the model is made; `GET /v1/models`: the one model;
- `POST /v1/completions` (`prompt`: one string), `POST /v1/chat/completions` (`messages` of
  string contents): `max_tokens`, `temperature` (0: greedy), `seed`, `stream`; a stream is
  SSE (`data: {chunk}` lines, then `data: [DONE]`), one chunk a token, and with
  `stream_options: {include_usage: true, continuous_usage_stats: true}` every chunk carries
  `usage` so far, as vLLM's do (a final chunk with no choices carries the total);
- `POST /v1/embeddings` (`input`: one string): the mean last state, unit length.

`usage` counts tokens as `samples/llm_tokens.py` does: the renter's client counts the same.
UNCHAINED_SAMPLE_OVERCOUNT=N makes it report N completion tokens more than it sent: a
dishonest server, for the tests of a renter disputing a count (never set otherwise).

Run as `python3 -m samples.llm_service [PORT]` (8000); LLM_SEED picks the weights.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import torch

from samples.llm_model import generate, model_of
from samples.llm_tokens import completion_tokens, decode, encode, prompt_text
from samples.sample_service import DEFAULT_PORT, MAX_BODY, Handler

MODEL = os.environ.get("LLM_MODEL", "unchained-gpt")
SEED = int(os.environ.get("LLM_SEED", "0"))
OVERCOUNT = int(os.environ.get("UNCHAINED_SAMPLE_OVERCOUNT", "0"))
DEFAULT_MAX_TOKENS = 16  # OpenAI's default for completions
MAX_TOKENS = 512


class Model:
    """The model and the lock its one CPU stream of work takes, one request's token at a time."""

    def __init__(self) -> None:
        torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS", "1"))))
        self.net = model_of(SEED)
        self.lock = threading.Lock()
        self.created = int(time.time())

    def tokens(self, prompt: list[int], body: dict[str, Any]) -> Iterator[int]:
        """The request's tokens as they come; ValueError (before any) naming a bad field."""
        temperature = float(body.get("temperature", 1.0) or 0.0)
        seed = int(body.get("seed") or 0)
        generated = generate(self.net, prompt, _cap(body), temperature, seed)
        return self._taking_turns(generated)

    def _taking_turns(self, generated: Iterator[int]) -> Iterator[int]:
        while True:
            with self.lock:  # token by token: concurrent streams take turns
                token = next(generated, None)
            if token is None:
                return
            yield token


class LlmHandler(Handler):
    model: Model
    disable_nagle_algorithm = True  # a token a write: none may wait for the last one's ACK

    def do_GET(self) -> None:
        if self.path == "/v1/models":
            card = {"id": MODEL, "object": "model", "created": self.model.created,
                    "owned_by": "unchained"}  # fmt: skip
            self._answer(200, {"object": "list", "data": [card]})
        else:
            super().do_GET()

    def do_POST(self) -> None:
        routes = {"/v1/completions": self.complete, "/v1/chat/completions": self.complete,
                  "/v1/embeddings": self.embed}  # fmt: skip
        route = routes.get(self.path.split("?")[0])
        if route is None:
            self._answer(404, {"error": {"message": f"no such path {self.path}"}})
            return
        length = int(self.headers.get("Content-Length") or 0)
        if not 0 < length <= MAX_BODY:
            self._answer(413, {"error": {"message": f"a body of 1 to {MAX_BODY} bytes"}}, True)
            return
        try:
            body = json.loads(self.rfile.read(length))
            if not isinstance(body, dict):
                raise ValueError("the body is a JSON object")
            route(body)
        except (ValueError, TypeError) as error:
            self._answer(400, {"error": {"message": str(error), "type": "invalid_request"}})

    def embed(self, body: dict[str, Any]) -> None:
        prompt = encode(prompt_text(self.path, body))
        with self.model.lock:
            vector = self.model.net.embed(prompt)
        usage = {"prompt_tokens": len(prompt), "total_tokens": len(prompt)}
        data = [{"object": "embedding", "index": 0, "embedding": vector}]
        self._answer(200, {"object": "list", "data": data, "model": MODEL, "usage": usage})

    def complete(self, body: dict[str, Any]) -> None:
        chat = self.path.startswith("/v1/chat/")
        prompt = encode(prompt_text(self.path, body))
        tokens = self.model.tokens(prompt, body)
        ident = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        head = {"id": ident, "created": int(time.time()), "model": MODEL}
        if body.get("stream"):
            self.stream(head, chat, len(prompt), tokens, body)
            return
        text = decode(list(tokens))
        sent = completion_tokens(text)
        usage = _usage(len(prompt), sent + OVERCOUNT)
        choice: dict[str, Any] = {"index": 0, "finish_reason": _finish(sent, body)}
        if chat:
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["text"] = text
        kind = "chat.completion" if chat else "text_completion"
        self._answer(200, {**head, "object": kind, "choices": [choice], "usage": usage})

    def stream(
        self, head: dict[str, Any], chat: bool, prompt: int, tokens: Iterator[int],
        body: dict[str, Any],
    ) -> None:  # fmt: skip
        """One SSE event a token, chunked (the connection stays open for the next request)."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        kind = "chat.completion.chunk" if chat else "text_completion"
        options = body.get("stream_options") or {}
        every = bool(options.get("continuous_usage_stats"))
        sent = 0

        def event(choices: list[dict[str, Any]], with_usage: bool) -> None:
            chunk: dict[str, Any] = {**head, "object": kind, "choices": choices}
            if with_usage:
                chunk["usage"] = _usage(prompt, sent + OVERCOUNT)
            self._chunk(b"data: " + json.dumps(chunk).encode() + b"\n\n")

        if chat:
            event([{"index": 0, "delta": {"role": "assistant", "content": ""}}], every)
        for token in tokens:
            text = decode([token])
            sent += 1
            part = {"delta": {"content": text}} if chat else {"text": text}
            event([{"index": 0, **part, "finish_reason": None}], every)
        done: dict[str, Any] = {"delta": {}} if chat else {"text": ""}
        event([{"index": 0, **done, "finish_reason": _finish(sent, body)}], every)
        if options.get("include_usage"):
            event([], True)
        self._chunk(b"data: [DONE]\n\n")
        self._chunk(b"")

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%b\r\n" % (len(data), data))
        self.wfile.flush()


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion}  # fmt: skip


def _cap(body: dict[str, Any]) -> int:
    """The request's max_tokens; ValueError unless a whole number from 1 to MAX_TOKENS."""
    cap = body.get("max_tokens") or body.get("max_completion_tokens") or DEFAULT_MAX_TOKENS
    if not isinstance(cap, int) or isinstance(cap, bool) or not 0 < cap <= MAX_TOKENS:
        raise ValueError(f"max_tokens: a whole number from 1 to {MAX_TOKENS}")
    return cap


def _finish(sent: int, body: dict[str, Any]) -> str:
    return "length" if sent >= _cap(body) else "stop"


def main() -> None:
    from http.server import ThreadingHTTPServer

    LlmHandler.model = Model()
    port = int(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_PORT
    ThreadingHTTPServer(("0.0.0.0", port), LlmHandler).serve_forever()


if __name__ == "__main__":
    main()
