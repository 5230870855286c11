"""Errors the devnet answers with: Ogmios v6 error codes, message and data."""

from __future__ import annotations

from typing import Any

from offchain.core.errors import UnchainedError


class LedgerError(UnchainedError):
    """A transaction or request the ledger refuses, carrying its Ogmios error code.

    `data` is whatever the Ogmios schema puts under `error.data` for that code (or None).
    """

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.data = data

    def to_json(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error


# JSON-RPC's codes (METHOD_NOT_FOUND, which clients read too, is in offchain.chain.ogmios)
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
INVALID_PARAMS = -32602
