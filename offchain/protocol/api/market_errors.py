"""What a client of the market is told when the market does not do what was asked, mapped from
the answer in one place for every client (the consumer's SDK and its light reader, the provider
daemon). Standard library only: the consumer's `job list` imports it and starts in a blink."""

from __future__ import annotations

import json
from typing import Any

from offchain.core.errors import UnchainedError


class MarketError(UnchainedError):
    """The market did not do what was asked. `status` is its HTTP status (0: no answer),
    `field` what it named at fault; `details` are those facts as plain data (a CLI's --json)."""

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message, self.details = message, details
        self.status: int = details.get("status", 0)
        self.field: str = details.get("field", "")


class MarketRefused(MarketError):
    """The market refused the request (4xx, or 5xx where it was not retried), or could not be
    reached or read on the one try the caller allowed: asking again at once does not help."""


class NoMatchingProvider(MarketRefused):
    """No offer can take the job now; the message says why, per requirement."""


class MarketUnavailable(MarketError):
    """No answer, or only 5xx, for all the time the caller let the request retry."""


def unreachable(url: str, exc: Exception, hint: str = "") -> MarketRefused:
    """A connection that failed (refused, timed out, TLS); `hint` names where the URL is set."""
    where = f" ({hint})" if hint else ""
    return MarketRefused(
        f"cannot reach the market at {url} ({exc!r}): is it running?{where}", url=url
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
