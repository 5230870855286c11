"""Signed GETs to the market with the standard library's HTTP client, for the commands that
only read it (`job list`, `offers search`): httpx and asyncio take longer to import than the
whole request, and those commands answer from one GET. What both clients share lives here:
the signer they take, the paths, how a refusal or an answer that is not JSON is told
(`consumer.client` is the SDK's asynchronous client, streams and uploads)."""

from __future__ import annotations

import dataclasses
import http.client
import json
from typing import Any, Protocol
from urllib.parse import quote, urlsplit

from consumer.errors import MarketRefused, NoMatchingProvider
from offchain.protocol.signed_request import RequestFields

TIMEOUT_S = 60


class RequestSigner(Protocol):
    """What signs the requests: `consumer.keys.ConsumerKey`, or a plain key alone
    (`consumer.request_key.RequestKey`) for a command that never touches the chain."""

    def sign_request(self, fields: RequestFields) -> dict[str, str]: ...


def my_jobs_path(limit: int) -> str:
    return f"/jobs?limit={limit}"


def offers_path(query: str, limit: int) -> str:
    return f"/offers?query={quote(query, safe='')}&limit={limit}"


@dataclasses.dataclass(frozen=True)
class MarketReader:
    """One consumer key reading one market (`identity` is signed into every request)."""

    url: str
    identity: str
    key: RequestSigner

    def get(self, path: str) -> Any:
        """One signed GET of `path` (below the URL's own path, as httpx joins a base URL);
        its JSON answer. An https market's certificate is checked."""
        parts = urlsplit(self.url)
        kind = http.client.HTTPSConnection if parts.scheme.lower() == "https" else (
            http.client.HTTPConnection)  # fmt: skip
        headers = self.key.sign_request(RequestFields.of("GET", path, b"", self.identity))
        connection = kind(parts.netloc, timeout=TIMEOUT_S)
        try:
            connection.request("GET", parts.path.rstrip("/") + path, headers=headers)
            answer = connection.getresponse()
            text = answer.read().decode("utf-8", "replace")
        except (OSError, http.client.HTTPException) as exc:  # refused, timed out, TLS, cut
            raise unreachable(self.url, exc) from exc
        finally:
            connection.close()
        if not 200 <= answer.status < 300:
            raise refusal(answer.status, text)
        return market_json(text, f"GET {path}")

    def my_jobs(self, limit: int = 100) -> list[dict[str, Any]]:
        """The jobs this key requested, as the market knows them (newest first)."""
        return self.get(my_jobs_path(limit))

    def search_offers(self, query: str, limit: int = 100) -> dict[str, Any]:
        return self.get(offers_path(query, limit))


def unreachable(url: str, exc: Exception) -> MarketRefused:
    return MarketRefused(
        f"cannot reach the market at {url} ({exc!r}): is it running? "
        "(--market-url / UNCHAINED_CONSUMER_MARKET_URL)",
        url=url,
    )


def market_json(text: str, what: str) -> Any:
    """The JSON a market answered; MarketRefused when it is not JSON (not an Unchained market,
    or a broken one), never a traceback."""
    try:
        return json.loads(text)
    except ValueError as exc:
        raise MarketRefused(
            f"the market's answer to {what} is not JSON ({exc}): is --market-url an Unchained "
            f"market? It began {text[:80]!r}",
            answer=text[:500],
        ) from exc


def refusal(status: int, text: str) -> MarketRefused:
    """The market's refusal (`status`, not 2xx) as MarketRefused naming the field it named;
    NoMatchingProvider for a job no offer can take."""
    try:
        problems = json.loads(text)["detail"]
        field = ".".join(str(part) for part in problems[0]["loc"])
        message = "; ".join(str(problem["msg"]) for problem in problems)
    except (ValueError, KeyError, IndexError, TypeError):
        field, message = "", text[:500]
    kind = MarketRefused
    if status == 409 and message.startswith("no offer can take the job"):
        kind = NoMatchingProvider
    return kind(f"the market refused ({status}): {message}", status=status, field=field)
