"""A NonceStore in this process's memory, for tests of the signed requests without a market's
database (the market's store is `offchain.market.services.nonces`)."""

from __future__ import annotations

import heapq
import threading


class MemoryNonceStore:
    """Nonces in this process's memory, forgotten once stale."""

    def __init__(self) -> None:
        self._seen: set[tuple[str, str]] = set()
        self._expiry: list[tuple[int, str, str]] = []
        self._lock = threading.Lock()  # routes run in a thread pool

    def claim(self, signer: str, nonce: str, *, keep_until_ms: int, now_ms: int) -> bool:
        with self._lock:
            while self._expiry and self._expiry[0][0] < now_ms:
                _, old_signer, old_nonce = heapq.heappop(self._expiry)
                self._seen.discard((old_signer, old_nonce))
            if (signer, nonce) in self._seen:
                return False
            self._seen.add((signer, nonce))
            heapq.heappush(self._expiry, (keep_until_ms, signer, nonce))
            return True
