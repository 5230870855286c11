"""The daemon's link to the market: every request CIP-8 signed with the provider key (a fresh
nonce each attempt), retried with backoff while the market is unreachable or answers 5xx.
A refusal (4xx) is final and says why. Losing the market never stops the daemon: callers
decide how long a request may keep trying."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
from pycardano import Network, PaymentSigningKey

from offchain.errors import UnchainedError
from offchain.protocol.signed_request import RequestFields, sign_request

FIRST_BACKOFF_S = 0.2
MAX_BACKOFF_S = 5.0
CHUNK = 1 << 20
REQUEST_TIMEOUT_S = 30.0


class MarketError(UnchainedError):
    """The market did not do what was asked; `status` is its HTTP status (0: no answer)."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class MarketUnavailable(MarketError):
    """No answer (or only 5xx) within the time the caller gave the request."""


class MarketRefused(MarketError):
    """The market answered 4xx: retrying the same request cannot help."""


@dataclasses.dataclass(frozen=True)
class Body:
    """What a request carries: JSON, or a file streamed from disk with its sha256."""

    content: bytes = b""
    file: Path | None = None
    sha256: str = ""

    @classmethod
    def of_json(cls, value: Any) -> Body:
        return cls(json.dumps(value, separators=(",", ":")).encode())

    @classmethod
    def of_file(cls, path: Path) -> Body:
        digest = hashlib.sha256()
        with open(path, "rb") as file:
            while chunk := file.read(CHUNK):
                digest.update(chunk)
        return cls(file=path, sha256=digest.hexdigest())

    def fields(self, method: str, path: str, market: str) -> RequestFields:
        fields = RequestFields.of(method, path, self.content, market)
        return dataclasses.replace(fields, body_sha256=self.sha256) if self.file else fields

    async def stream(self) -> AsyncIterator[bytes]:
        assert self.file is not None
        with open(self.file, "rb") as file:
            while chunk := file.read(CHUNK):
                yield chunk


class MarketLink:
    def __init__(self, url: str, identity: str, key: PaymentSigningKey, network: Network) -> None:
        self.identity = identity
        self.key = key
        self.network = network
        self.http = httpx.AsyncClient(base_url=url, timeout=REQUEST_TIMEOUT_S)

    async def aclose(self) -> None:
        await self.http.aclose()

    async def send(
        self,
        method: str,
        path: str,
        body: Body | None = None,
        *,
        retry_for_s: float = 30.0,
        timeout_s: float = REQUEST_TIMEOUT_S,
    ) -> Any:
        """The market's JSON answer (None when empty); retried until `retry_for_s` has passed."""
        loop = asyncio.get_running_loop()
        give_up = loop.time() + retry_for_s
        backoff = FIRST_BACKOFF_S
        while True:
            try:
                answer = await self._once(method, path, body or Body(), timeout_s)
            except httpx.TransportError as exc:
                problem, status = f"{type(exc).__name__}: {exc}", 0
            else:
                if answer.status_code < 400:
                    return answer.json() if answer.content else None
                problem, status = f"{answer.status_code} {answer.text}", answer.status_code
                if status < 500:
                    raise MarketRefused(f"{method} {path}: {problem}", status)
            if loop.time() + backoff > give_up:
                raise MarketUnavailable(f"{method} {path}: {problem}", status)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF_S)

    async def _once(self, method: str, path: str, body: Body, timeout_s: float) -> httpx.Response:
        fields = body.fields(method, path, self.identity)
        headers = sign_request(self.key, fields, network=self.network)
        if body.file is not None:
            content: bytes | AsyncIterator[bytes] = body.stream()
            headers["content-type"] = "application/octet-stream"
        else:
            content = body.content
            if content:
                headers["content-type"] = "application/json"
        return await self.http.request(
            method, path, content=content, headers=headers, timeout=timeout_s
        )
