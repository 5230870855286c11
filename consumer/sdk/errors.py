"""The consumer's refusals. Each says what was wrong and what to do about it, so the CLI prints
the message as it is and `--json` carries the kind and the fields a script acts on. The
market's own (MarketRefused, NoMatchingProvider) are every client's:
`offchain.protocol.api.market_errors`."""

from __future__ import annotations

from typing import Any

from offchain.core.errors import UnchainedError


class ConsumerError(UnchainedError):
    """A consumer-side refusal; `details` are its facts as plain data (for `--json`)."""

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message, self.details = message, details


class WalletError(ConsumerError):
    """No usable key: missing file, unreadable envelope, not a mnemonic."""


class QuoteRejected(ConsumerError):
    """The quote or the escrow it asks for is not what was requested or not signed by the
    provider it names: nothing is locked."""


class InsufficientFunds(ConsumerError):
    """The consumer's address holds less than the lock and its fee need."""


class NotRefundableYet(ConsumerError):
    """The escrow's deadline and settle window have not passed in chain time."""


class NothingToDo(ConsumerError):
    """The escrow is already spent (settled, refunded) or the job has no escrow."""


class ResultMismatch(ConsumerError):
    """The result archive or its receipt is not what the provider signed: nothing unpacked."""


class UnpackRefused(ConsumerError):
    """The result archive is what the provider signed, but unpacking it would write outside
    its folder, make links or devices, or cannot finish: nothing unpacked, the archive kept."""
