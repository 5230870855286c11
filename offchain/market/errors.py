"""The market's refusals. Each names the field at fault; the API maps each kind to one HTTP
status in one handler (`app.py`), so services stay free of HTTP."""

from __future__ import annotations

from offchain.core.errors import UnchainedError


class MarketRefusal(UnchainedError):
    """A refusal naming the field (dotted, as the request spells it) that caused it."""

    def __init__(self, message: str, field: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class Invalid(MarketRefusal):
    """The input is well formed but cannot be served (impossible requirements, bad hashes)."""


class Unauthorized(MarketRefusal):
    """The request is not signed, or not signed by the key it claims, or stale."""


class Forbidden(MarketRefusal):
    """Signed by a party that has no right to this job or its results."""


class NotFound(MarketRefusal):
    """No such job, offer or blob."""


class Conflict(MarketRefusal):
    """The request is valid but the state forbids it now (a replayed nonce, a job in another
    state, no offer that can take the job)."""


class TooLarge(MarketRefusal):
    """A body or upload over its limit."""


class TooMany(MarketRefusal):
    """One client asks for more at once than it may hold (live streams)."""


class Busy(MarketRefusal):
    """The market holds all it can of something at once (live streams): try again later."""
