"""The crash-safety tests' hook: a process set to crash at a named point SIGKILLs itself there,
exactly as an operator's `kill -9` or a power cut would stop it (no cleanup runs)."""

from __future__ import annotations

import os
import signal

from offchain.market.settings import MarketSettings


def crash_point(settings: MarketSettings, name: str) -> None:
    """Die here if the settings name this point (`crash_at`, tests only)."""
    if settings.crash_at == name:
        os.kill(os.getpid(), signal.SIGKILL)
