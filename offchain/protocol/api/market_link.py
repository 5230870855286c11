"""The one HTTP client of an Unchained market, for the consumer's SDK and the provider daemon:
every request CIP-8 signed by the party's key (a fresh nonce each attempt), answers as plain
JSON or parsed into the market's public models (`offchain.protocol.api.wire`), failures as the one
`MarketError` family (`offchain.protocol.api.market_errors`). A request
may retry with backoff while the market is unreachable or answers 5xx (the daemon, which must
outlive a lost market); without retries its one failure is final (the consumer's commands).
Each app keeps its own calls: `consumer.sdk.client` names its paths, the daemon sends its own."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, ClassVar, Self

import httpx

from offchain.protocol.api.market_errors import MarketUnavailable, market_json, refusal, unreachable
from offchain.protocol.api.signed_request import RequestFields, RequestSigner
from offchain.protocol.api.wire import Model, parse, parse_list

FIRST_BACKOFF_S = 0.2
MAX_BACKOFF_S = 5.0
CHUNK = 1 << 20
REQUEST_TIMEOUT_S = 30.0
NO_CONTENT = 204  # the market's answer that carries nothing (a heartbeat)


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


@dataclasses.dataclass
class MarketLink:
    """One party's key talking to one market (`identity` is signed into every request). A
    party's subclass adds its calls and may set its own timeout, and `hint`: where its market
    URL is set, for the message when the market cannot be reached."""

    timeout_s: ClassVar[float] = REQUEST_TIMEOUT_S
    hint: ClassVar[str] = ""

    url: str
    identity: str
    signer: RequestSigner
    http: httpx.AsyncClient

    @classmethod
    def open(cls, url: str, identity: str, signer: RequestSigner) -> Self:
        # A plain http:// market never does TLS (paths are relative, redirects not followed),
        # so its client skips loading the CA bundle, a good part of a CLI's start; any other
        # URL verifies certificates.
        plain_http = url.lower().startswith("http://")
        http = httpx.AsyncClient(base_url=url, timeout=cls.timeout_s, verify=not plain_http)
        return cls(url, identity, signer, http)

    async def aclose(self) -> None:
        await self.http.aclose()

    async def send(
        self,
        method: str,
        path: str,
        body: Body | None = None,
        *,
        retry_for_s: float = 0.0,
        timeout_s: float | None = None,
    ) -> Any:
        """The market's JSON answer (None for no content). With `retry_for_s`, no answer or
        a 5xx is tried again until that time has passed, then MarketUnavailable; a refusal
        (4xx) is final at once, as is any failure when no retry was allowed."""
        loop = asyncio.get_running_loop()
        give_up = loop.time() + retry_for_s
        backoff = FIRST_BACKOFF_S
        while True:
            try:
                answer = await self._once(method, path, body or Body(), timeout_s)
            except httpx.TransportError as exc:
                problem = unreachable(self.url, exc, self.hint)
            else:
                if answer.is_success:
                    if answer.status_code == NO_CONTENT:
                        return None
                    return market_json(answer.text, f"{method} {path}")
                problem = refusal(answer.status_code, answer.text)
                if problem.status < 500:
                    raise problem
            if retry_for_s <= 0:
                raise problem
            if loop.time() + backoff > give_up:
                raise MarketUnavailable(f"{method} {path}: {problem}", **problem.details)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF_S)

    async def answer(
        self,
        model: type[Model],
        method: str,
        path: str,
        body: Body | None = None,
        *,
        retry_for_s: float = 0.0,
        timeout_s: float | None = None,
    ) -> Model:
        """`send`, its answer parsed as `model` (`offchain.protocol.api.wire`); MarketRefused
        when it is not one."""
        sent = await self.send(method, path, body, retry_for_s=retry_for_s, timeout_s=timeout_s)
        return parse(model, sent, f"{method} {path}")

    async def answers(
        self, model: type[Model], path: str, *, retry_for_s: float = 0.0,
        timeout_s: float | None = None,
    ) -> list[Model]:  # fmt: skip
        """A GET of `path`, its answer parsed as a list of `model`."""
        sent = await self.send("GET", path, retry_for_s=retry_for_s, timeout_s=timeout_s)
        return parse_list(model, sent, f"GET {path}")

    async def _once(
        self, method: str, path: str, body: Body, timeout_s: float | None
    ) -> httpx.Response:
        headers = self.signer.sign_request(body.fields(method, path, self.identity))
        if body.file is not None:
            content: bytes | AsyncIterator[bytes] = body.stream()
            headers["content-type"] = "application/octet-stream"
        else:
            content = body.content
            if content:
                headers["content-type"] = "application/json"
        timeout = self.http.timeout if timeout_s is None else httpx.Timeout(timeout_s)
        return await self.http.request(
            method, path, content=content, headers=headers, timeout=timeout
        )

    @contextlib.asynccontextmanager
    async def stream(self, path: str, *, endless: bool = False) -> AsyncIterator[httpx.Response]:
        """A signed GET whose answer is read as it arrives (a result archive; `endless`: with
        no read timeout, for events that come when they come); a refusal or no answer raised
        as `send` raises them, before anything is read."""
        headers = self.signer.sign_request(RequestFields.of("GET", path, b"", self.identity))
        timeout = self.http.timeout
        if endless:
            timeout = httpx.Timeout(timeout.connect, read=None)
        request = self.http.build_request("GET", path, headers=headers, timeout=timeout)
        try:
            answer = await self.http.send(request, stream=True)
        except httpx.TransportError as exc:
            raise unreachable(self.url, exc, self.hint) from exc
        try:
            if answer.is_error:
                await answer.aread()
                raise refusal(answer.status_code, answer.text)
            yield answer
        finally:
            await answer.aclose()
