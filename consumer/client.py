"""The market's HTTP API as the consumer calls it: every request CIP-8 signed with the
consumer's key (fresh nonce), answers as plain data, refusals as MarketRefused naming the
field the market named. The wire stays here (and in `consumer.market_read`, for the commands
that only read); `consumer.session` gives it meaning."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, BinaryIO

import httpx

from consumer.market_read import (
    TIMEOUT_S,
    RequestSigner,
    market_json,
    my_jobs_path,
    offers_path,
    refusal,
    unreachable,
)
from offchain.protocol.signed_request import RequestFields

BATCH_BYTES = 4 << 20  # hashed and written at once, off the event loop


@dataclasses.dataclass
class MarketClient:
    """One consumer key talking to one market (`identity` is signed into every request)."""

    url: str
    identity: str
    key: RequestSigner
    http: httpx.AsyncClient

    @classmethod
    def open(cls, url: str, identity: str, key: RequestSigner) -> MarketClient:
        # A plain http:// market never does TLS (paths are relative, redirects not followed),
        # so its client skips loading the CA bundle, a good part of a CLI's start; any other
        # URL verifies certificates as before.
        plain_http = url.lower().startswith("http://")
        http = httpx.AsyncClient(base_url=url, timeout=TIMEOUT_S, verify=not plain_http)
        return cls(url, identity, key, http)

    async def aclose(self) -> None:
        await self.http.aclose()

    def _headers(self, method: str, path: str, body: bytes) -> dict[str, str]:
        fields = RequestFields.of(method, path, body, self.identity)
        return self.key.sign_request(fields)

    async def call(self, method: str, path: str, body: Any = None) -> Any:
        """One signed JSON request; its JSON answer."""
        content = b"" if body is None else json.dumps(body).encode()
        headers = self._headers(method, path, content)
        if body is not None:
            headers["content-type"] = "application/json"
        try:
            answer = await self.http.request(method, path, content=content, headers=headers)
        except httpx.TransportError as exc:
            raise unreachable(self.url, exc) from exc
        check(answer)
        return market_json(answer.text, f"{method} {path}")

    async def request_job(self, request: dict[str, Any]) -> dict[str, Any]:
        return await self.call("POST", "/jobs", request)

    async def job(self, job_id: str) -> dict[str, Any]:
        return await self.call("GET", f"/jobs/{job_id}")

    async def my_jobs(self, limit: int = 100) -> list[dict[str, Any]]:
        """The jobs this key requested, as the market knows them (newest first)."""
        return await self.call("GET", my_jobs_path(limit))

    async def escrow_parameters(self, job_id: str) -> dict[str, Any]:
        return await self.call("GET", f"/jobs/{job_id}/escrow")

    async def report_escrow(self, job_id: str, escrow: str) -> dict[str, Any]:
        return await self.call("POST", f"/jobs/{job_id}/escrow", {"escrow": escrow})

    async def signatures(self, job_id: str) -> dict[str, Any]:
        return await self.call("GET", f"/jobs/{job_id}/signatures")

    async def logs(self, job_id: str, after: int = -1) -> list[dict[str, Any]]:
        return await self.call("GET", f"/jobs/{job_id}/logs?after={after}")

    async def log_tail(self, job_id: str, lines: int) -> list[dict[str, Any]]:
        """The job's last `lines` log lines, oldest first."""
        return await self.call("GET", f"/jobs/{job_id}/logs?tail={lines}")

    async def search_offers(self, query: str, limit: int = 100) -> dict[str, Any]:
        return await self.call("GET", offers_path(query, limit))

    async def events(self, job_id: str) -> AsyncIterator[dict[str, Any]]:
        """The job's transitions (server-sent events) from the first; ends at a final state."""
        path = f"/jobs/{job_id}/events"
        headers = self._headers("GET", path, b"")
        timeout = httpx.Timeout(TIMEOUT_S, read=None)
        async with self.http.stream("GET", path, headers=headers, timeout=timeout) as stream:
            if stream.is_error:
                await stream.aread()
                check(stream)
            async for line in stream.aiter_lines():
                if line.startswith("data: "):
                    yield market_json(line.removeprefix("data: "), f"an event of {path}")

    async def download_result(self, job_id: str, into: Path) -> str:
        """Stream the result archive into `into`, hashing as it arrives; its sha256 (hex).
        Chunks are taken as the connection hands them (re-chunking copies every byte once
        more) and hashed and written in a worker thread, one batch while the next arrives:
        both release the GIL, so the disk and the socket overlap."""
        path = f"/jobs/{job_id}/result"
        digest = hashlib.sha256()
        headers = self._headers("GET", path, b"")

        def sink(file: BinaryIO, batch: list[bytes]) -> None:
            for chunk in batch:
                digest.update(chunk)
                file.write(chunk)

        async with self.http.stream("GET", path, headers=headers) as stream:
            if stream.is_error:
                await stream.aread()
                check(stream)
            with into.open("wb") as file:
                batch: list[bytes] = []
                size = 0
                writing: asyncio.Task[None] | None = None
                async for chunk in stream.aiter_raw():
                    batch.append(chunk)
                    size += len(chunk)
                    if size >= BATCH_BYTES:
                        if writing is not None:
                            await writing
                        writing = asyncio.create_task(asyncio.to_thread(sink, file, batch))
                        batch, size = [], 0
                if writing is not None:
                    await writing
                sink(file, batch)
        return digest.hexdigest()


def check(answer: httpx.Response) -> None:
    """MarketRefused (NoMatchingProvider for a job no offer can take) for a refusal."""
    if not answer.is_success:
        raise refusal(answer.status_code, answer.text)
