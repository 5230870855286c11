"""Signed GETs to the market with the standard library's HTTP client, for the commands that
only read it (`job list`, `offers search`): httpx and asyncio take longer to import than the
whole request, and those commands answer from one GET. What both clients share lives here:
the paths and the hint where the URL is set (`consumer.sdk.client` is the SDK's asynchronous
client, on `offchain.protocol.api.market_link`; a failure is told as both tell it,
`offchain.protocol.api.market_errors`)."""

from __future__ import annotations

import dataclasses
import http.client
from typing import Any
from urllib.parse import quote, urlsplit

from offchain.protocol.api.market_errors import market_json, refusal, unreachable
from offchain.protocol.api.signed_request import RequestFields, RequestSigner

TIMEOUT_S = 60
HINT = "--market-url / UNCHAINED_CONSUMER_MARKET_URL"  # where the market's URL is set


def my_jobs_path(limit: int) -> str:
    return f"/jobs?limit={limit}"


def job_path(job_id: str) -> str:
    return f"/jobs/{job_id}"


def log_tail_path(job_id: str, lines: int) -> str:
    return f"/jobs/{job_id}/logs?tail={lines}"


def offers_path(query: str, limit: int) -> str:
    return f"/offers?query={quote(query, safe='')}&limit={limit}"


@dataclasses.dataclass(frozen=True)
class MarketReader:
    """One consumer key reading one market (`identity` is signed into every request): its
    `consumer.sdk.keys.ConsumerKey`, or a plain key alone (`consumer.sdk.request_key.RequestKey`)
    for a command that never touches the chain."""

    url: str
    identity: str
    key: RequestSigner

    def get(self, path: str, signed: bool = True) -> Any:
        """One signed GET of `path` (below the URL's own path, as httpx joins a base URL);
        its JSON answer. An https market's certificate is checked. A public page is read
        unsigned (`signed=False`), so a key kept in a wallet can read it too."""
        parts = urlsplit(self.url)
        kind = http.client.HTTPSConnection if parts.scheme.lower() == "https" else (
            http.client.HTTPConnection)  # fmt: skip
        headers = {}
        if signed:
            headers = self.key.sign_request(RequestFields.of("GET", path, b"", self.identity))
        connection = kind(parts.netloc, timeout=TIMEOUT_S)
        try:
            connection.request("GET", parts.path.rstrip("/") + path, headers=headers)
            answer = connection.getresponse()
            text = answer.read().decode("utf-8", "replace")
        except (OSError, http.client.HTTPException) as exc:  # refused, timed out, TLS, cut
            raise unreachable(self.url, exc, HINT) from exc
        finally:
            connection.close()
        if not 200 <= answer.status < 300:
            raise refusal(answer.status, text)
        return market_json(text, f"GET {path}")

    def my_jobs(self, limit: int = 100) -> list[dict[str, Any]]:
        """The jobs this key requested, as the market knows them (newest first)."""
        return self.get(my_jobs_path(limit))

    def job(self, job_id: str) -> dict[str, Any]:
        """The job as the market knows it (`JobPublic`'s JSON)."""
        return self.get(job_path(job_id))

    def log_tail(self, job_id: str, lines: int) -> list[dict[str, Any]]:
        """The job's last `lines` log lines (`LogPublic`'s JSON), oldest first."""
        return self.get(log_tail_path(job_id, lines))

    def search_offers(self, query: str, limit: int = 100) -> dict[str, Any]:
        """Offers are public: the search is not signed."""
        return self.get(offers_path(query, limit), signed=False)
