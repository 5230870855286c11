"""Live progress of one job in the terminal (rich): state, elapsed time, metered units, cost so
far and the log tail, from the market's event stream and its logs. Display only: what is paid
is decided by the provider's signed receipt, shown once it arrives. It ends at the first final
state (or at `completed`, when asked: the settle follows on its own), with the reason: a failed
job's stream goes on to its refund after the close, so the
display stops at `failed`, unless the job holds a receipt (a zero-unit one if it never ran):
then it ends at the settle of the market's next batch, where the renter gets its lock back.
The metered time stops when the job stops running. Not in a terminal, each state change is one line,
written at once (a live panel would show nothing until the end)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Awaitable, Callable

from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from consumer.sdk.session import Consumer
from offchain.protocol.api.wire import EventPublic
from offchain.protocol.job.job_state import JobState
from offchain.protocol.job.outcome import describe
from offchain.protocol.ledger.amounts import ada

FINAL = {JobState.SETTLED, JobState.REFUNDED, JobState.SLASHED, JobState.FAILED,
         JobState.EXPIRED, JobState.CANCELLED}  # fmt: skip
POLL_S = 1
TAIL_LINES = 8


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclasses.dataclass
class Progress:
    """What the display shows; updated by the event stream and the log/status poller."""

    job_id: str
    price_per_unit: int
    max_units: int
    state: str = "…"
    created_ms: int | None = None
    running_since_ms: int | None = None
    stopped_ms: int | None = None  # when it left `running`: the units stop counting there
    reason: str | None = None
    outcome: str | None = None  # how the run ended, with the receipt (the provider's word)
    exit_code: int | None = None
    receipt_units: int | None = None
    log_seq: int = -1
    tail: list[str] = dataclasses.field(default_factory=list)
    stop_at: frozenset[str] = frozenset(FINAL)  # the display ends at the first of these

    def event(self, event: EventPublic) -> None:
        self.state = event.to_state
        if self.created_ms is None:
            self.created_ms = event.at_ms
        if self.state == JobState.RUNNING:
            self.running_since_ms = event.at_ms
        elif self.running_since_ms is not None and self.stopped_ms is None:
            self.stopped_ms = event.at_ms

    @property
    def final(self) -> bool:
        """A final state; a failed job with a receipt (a zero-unit one if it never ran) is
        settled in the market's next batch, so its display waits for that."""
        return self.state in self.stop_at and not (
            self.state == JobState.FAILED and self.receipt_units is not None
        )

    @property
    def why(self) -> str:
        """Why it never ran, and once its zero-unit receipt is settled, that the renter has
        its lock back."""
        if not self.reason or self.receipt_units != 0 or self.state != JobState.SETTLED:
            return self.reason or ""
        return f"{self.reason}; refunded in that settle: your lock less its fee allowance"

    @property
    def units(self) -> int:
        """The receipt's units once signed; until then the seconds run so far, rounded up."""
        if self.receipt_units is not None:
            return self.receipt_units
        if self.running_since_ms is None:
            return 0
        until = self.stopped_ms if self.stopped_ms is not None else wall_ms()
        return min(-(-(until - self.running_since_ms) // 1000), self.max_units)

    @property
    def ended(self) -> str:
        """`timed out after 5 s (exit 137)`, once the provider reported how the run ended."""
        return describe(self.outcome, self.exit_code, self.receipt_units)

    @property
    def metered(self) -> str:
        if self.receipt_units is not None:
            return "receipt"
        return "metered" if self.stopped_ms is not None or self.final else "so far"

    def render(self) -> Panel:
        elapsed_s = (wall_ms() - self.created_ms) // 1000 if self.created_ms else 0
        metered = self.metered
        table = Table.grid(padding=(0, 2))
        table.add_row("state", Text(self.state, style="bold"))
        if self.outcome:
            table.add_row("outcome", Text(self.ended, style="bold"))
        if self.reason:
            table.add_row("reason", self.why)
        table.add_row("elapsed", f"{elapsed_s // 60}m{elapsed_s % 60:02d}s")
        table.add_row("units", f"{self.units} / {self.max_units} s ({metered})")
        table.add_row("cost", f"{ada(self.units * self.price_per_unit)} ({metered})")
        logs = Text("\n".join(self.tail[-TAIL_LINES:]) or "(no log lines yet)", style="dim")
        title = f"job {self.job_id}"
        return Panel(
            Group(table, Panel(logs, title="log")), title=title, subtitle="Ctrl-C detaches"
        )


async def watch(
    consumer: Consumer, job_id: str, console: Console, stop_at: frozenset[str] = frozenset(FINAL)
) -> str:
    """Show the job live until a final state (or another of `stop_at`); its last state.
    Ctrl-C leaves the job running."""
    datum = consumer.store.get(job_id).datum
    progress = Progress(job_id, datum.price_per_unit, datum.max_units, stop_at=stop_at)

    async def follow_events() -> None:
        async for event in consumer.events(job_id):
            await _take(progress, event, refresh)

    async def refresh() -> None:
        for line in await consumer.logs(job_id, progress.log_seq):
            progress.tail.append(line.text)
            progress.log_seq = line.seq
        status = await consumer.status(job_id)
        progress.receipt_units, progress.reason = status.receipt_units, status.failure_reason
        progress.outcome, progress.exit_code = status.outcome, status.exit_code

    async def poll() -> None:
        while True:
            await refresh()
            await asyncio.sleep(POLL_S)

    if not console.is_terminal:
        return await _lines(consumer, progress, console, refresh)
    with Live(progress.render(), console=console, refresh_per_second=4) as live:
        poller = asyncio.create_task(poll())
        events = asyncio.create_task(follow_events())
        try:
            while not events.done() and not progress.final:
                live.update(progress.render())
                await asyncio.wait([events, poller], timeout=0.25,
                                   return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
                if poller.done():
                    poller.result()  # a market error ends the display with its message
            if events.done():
                events.result()
        finally:
            for task in (poller, events):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        await refresh()
        live.update(progress.render())
    return progress.state


async def _lines(
    consumer: Consumer, progress: Progress, console: Console, refresh: Callable[[], Awaitable[None]]
) -> str:
    """One line per state change, flushed as it happens, and the outcome at the final one."""
    async with contextlib.aclosing(consumer.events(progress.job_id)) as events:
        async for event in events:
            await _take(progress, event, refresh)
            say(console, f"job {progress.job_id}: {progress.state}")
            if progress.final:
                break
    await refresh()
    cost = f"{progress.units} unit(s), {ada(progress.units * progress.price_per_unit)}"
    why = progress.ended or progress.why  # how the run ended, or why it never ran
    reason = f": {why}" if why else ""
    ended = f"job {progress.job_id} ended {progress.state}{reason}"
    say(console, f"{ended} ({cost}, {progress.metered})")
    return progress.state


async def _take(
    progress: Progress, event: EventPublic, refresh: Callable[[], Awaitable[None]]
) -> None:
    """Apply a state change; a failure's receipt is read first (the market stores the two
    together), so the display knows at once whether a refund settle follows."""
    if event.to_state == JobState.FAILED:
        await refresh()
    progress.event(event)


def say(console: Console, line: str) -> None:
    """One line as it is (no wrapping at 80 columns in a pipe, no colours), written now."""
    console.print(line, highlight=False, soft_wrap=True)
    console.file.flush()
