"""How a run ended, as the provider's daemon reports it with its signed receipt, and how people
read it. The receipt signs the units billed, not this: the outcome and the exit code are the
provider's word, shown beside the job's state (a job settles for what it used whatever its
program did, and is never shown as a plain success when it failed)."""

from __future__ import annotations

from enum import StrEnum


class Outcome(StrEnum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # the program exited non-zero
    TIMEOUT = "timeout"  # killed at the spec's max_duration_s
    OOM = "oom"  # killed for memory
    CANCELLED = "cancelled"  # stopped while running at its renter's request
    STOPPED = "stopped"  # stopped while running because its provider stopped


WORDS: dict[str, str] = {  # a StrEnum key is its value
    Outcome.SUCCEEDED: "succeeded",
    Outcome.FAILED: "failed",
    Outcome.TIMEOUT: "timed out",
    Outcome.OOM: "out of memory",
    Outcome.CANCELLED: "cancelled",
    Outcome.STOPPED: "stopped by its provider",
}


def describe(outcome: str | None, exit_code: int | None, seconds: int | None = None) -> str:
    """`timed out after 5 s (exit 137)`; "" when the provider reported no outcome."""
    if outcome is None:
        return ""
    words = WORDS.get(outcome, outcome)
    after = "" if seconds is None else f" after {seconds} s"
    code = "" if exit_code is None else f" (exit {exit_code})"
    return f"{words}{after}{code}"
