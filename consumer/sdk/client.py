"""The market's HTTP API as the consumer calls it: its own paths on the one market client
(`offchain.protocol.api.market_link`: signed requests, refusals as MarketRefused naming the
field the market named), its answers parsed into the market's public models
(`offchain.protocol.api.wire`). `consumer.sdk.market_read` reads the same API
for the commands that only read; `consumer.sdk.session` gives it meaning."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, BinaryIO

from consumer.sdk.market_read import (
    HINT,
    TIMEOUT_S,
    job_path,
    log_tail_path,
    my_jobs_path,
    offers_path,
)
from offchain.protocol.api.market_errors import market_json
from offchain.protocol.api.market_link import Body, MarketLink
from offchain.protocol.api.wire import (
    CancelView,
    EscrowParameters,
    EventPublic,
    JobPublic,
    LogPublic,
    OfferSearch,
    Quote,
    SignedEvidence,
    parse,
)

BATCH_BYTES = 4 << 20  # hashed and written at once, off the event loop


class MarketClient(MarketLink):
    """One consumer key talking to one market; a request is tried once."""

    timeout_s = TIMEOUT_S
    hint = HINT

    async def request_job(self, request: dict[str, Any]) -> Quote:
        return await self.answer(Quote, "POST", "/jobs", Body.of_json(request))

    async def job(self, job_id: str) -> JobPublic:
        return await self.answer(JobPublic, "GET", job_path(job_id))

    async def my_jobs(self, limit: int = 100) -> list[JobPublic]:
        """The jobs this key requested, as the market knows them (newest first)."""
        return await self.answers(JobPublic, my_jobs_path(limit))

    async def escrow_parameters(self, job_id: str) -> EscrowParameters:
        return await self.answer(EscrowParameters, "GET", f"/jobs/{job_id}/escrow")

    async def registry_account(self, job_id: str, sealed: str) -> None:
        """Hand the market the renter's registry account sealed to the quoted provider."""
        body = Body.of_json({"sealed": sealed})
        await self.send("POST", f"/jobs/{job_id}/registry-account", body)

    async def report_escrow(self, job_id: str, escrow: str) -> JobPublic:
        body = Body.of_json({"escrow": escrow})
        return await self.answer(JobPublic, "POST", f"/jobs/{job_id}/escrow", body)

    async def cancel(self, job_id: str, transaction: str | None = None) -> CancelView:
        """Ask to cancel the job: its Cancel (CBOR hex), none when nothing was locked."""
        body = {} if transaction is None else {"transaction": transaction}
        return await self.answer(CancelView, "POST", f"/jobs/{job_id}/cancel", Body.of_json(body))

    async def cancel_status(self, job_id: str) -> CancelView:
        return await self.answer(CancelView, "GET", f"/jobs/{job_id}/cancel")

    async def signatures(self, job_id: str) -> SignedEvidence:
        return await self.answer(SignedEvidence, "GET", f"/jobs/{job_id}/signatures")

    async def logs(self, job_id: str, after: int = -1) -> list[LogPublic]:
        return await self.answers(LogPublic, f"/jobs/{job_id}/logs?after={after}")

    async def log_tail(self, job_id: str, lines: int) -> list[LogPublic]:
        """The job's last `lines` log lines, oldest first."""
        return await self.answers(LogPublic, log_tail_path(job_id, lines))

    async def search_offers(self, query: str, limit: int = 100) -> OfferSearch:
        return await self.answer(OfferSearch, "GET", offers_path(query, limit))

    async def events(self, job_id: str) -> AsyncIterator[EventPublic]:
        """The job's transitions (server-sent events) from the first; ends at a final state."""
        path = f"/jobs/{job_id}/events"
        async with self.stream(path, endless=True) as stream:
            async for line in stream.aiter_lines():
                if line.startswith("data: "):
                    what = f"an event of {path}"
                    yield parse(EventPublic, market_json(line.removeprefix("data: "), what), what)

    async def download_result(self, job_id: str, into: Path) -> str:
        """Stream the result archive into `into`, hashing as it arrives; its sha256 (hex).
        Chunks are taken as the connection hands them (re-chunking copies every byte once
        more) and hashed and written in a worker thread, one batch while the next arrives:
        both release the GIL, so the disk and the socket overlap."""
        digest = hashlib.sha256()

        def sink(file: BinaryIO, batch: list[bytes]) -> None:
            for chunk in batch:
                digest.update(chunk)
                file.write(chunk)

        async with self.stream(f"/jobs/{job_id}/result") as stream:
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
