"""A stopped devnet leaves no process behind: its script workers, their forkserver and the
resource tracker all end with it, on SIGTERM (what `DevnetProcess.stop` sends) and SIGINT, and
even when it is killed with SIGKILL (nothing of it runs then: the helpers end with their
parent)."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from devnet.process import DevnetProcess
from offchain.chain.ogmios import request

pytestmark = pytest.mark.devnet  # each test starts devnets of its own

PROC = Path("/proc")


def process_table() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, start time in clock ticks), read from /proc/PID/stat."""
    table = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:  # it ended while we looked
                continue
            fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "
            if fields[0] != "Z":
                table[int(entry.name)] = (int(fields[1]), fields[19])
    return table


def descendants(pid: int) -> dict[int, str]:
    """Every living process below `pid`, with its start time (a reused pid has another)."""
    table = process_table()
    found: dict[int, str] = {}
    parents = [pid]
    while parents:
        parent = parents.pop()
        for child, (ppid, started) in table.items():
            if ppid == parent and child not in found:
                found[child] = started
                parents.append(child)
    return found


def survivors(processes: dict[int, str], timeout_s: float = 10) -> dict[int, str]:
    deadline = time.monotonic() + timeout_s
    while True:
        table = process_table()
        left = {pid: s for pid, s in processes.items() if pid in table and table[pid][1] == s}
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def command_line(pid: int) -> str:
    try:
        return (PROC / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return "(gone)"


@pytest.mark.parametrize(
    "signum", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL], ids=["SIGTERM", "SIGINT", "SIGKILL"]
)
async def test_stop_leaves_no_child_process(tmp_path, signum):
    devnet = DevnetProcess(tmp_path / "data").start()
    try:
        assert devnet.process is not None
        await request(devnet.url, "queryNetwork/tip")
        deadline = time.monotonic() + 30  # the pool starts its forkserver and a first worker
        while len(children := descendants(devnet.process.pid)) < 3:
            assert time.monotonic() < deadline, f"no script workers started: {children}"
            time.sleep(0.1)
        commands = {pid: command_line(pid) for pid in children}
        assert any("forkserver" in c for c in commands.values()), commands
        assert any("resource_tracker" in c for c in commands.values()), commands
        if signum == signal.SIGKILL:
            devnet.kill()
            assert devnet.process.returncode == -signal.SIGKILL
        else:
            devnet.stop(signum)
            assert devnet.process.returncode == 0
            assert "devnet stopped" in (devnet.data_dir / "devnet.log").read_text()
        left = survivors(children)
        assert not left, {pid: commands[pid] for pid in left}
    finally:
        devnet.kill()
