"""`unchained ARGS` for the tests, as a process of its own, without paying the interpreter's
imports each time: this launcher (stdlib only, run with `-I -S`) hands its argv, environment,
working directory and stdio to the pytest worker's CLI zygote (tests/cli_zygote.py), which
forks a child that runs `unchained.cli` exactly as `python -m unchained.cli ARGS` would, with
pycardano and the other third-party libraries already imported (they cost ~2 s of CPU per
command, most of a CLI test). The launcher forwards signals to that child and exits as it did.
It starts the zygote if none listens yet, and runs a fresh interpreter instead when the zygote
cannot serve this environment.

Usage: python -I -S tests/cli_launch.py SOCKET OWNER_PID ARGS..."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
START_TIMEOUT_S = 120  # the zygote's imports, on a loaded machine
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1)


def fresh(args: list[str]) -> None:
    """The plain way: a new interpreter in this process's place."""
    os.execv(sys.executable, [sys.executable, "-m", "unchained.cli", *args])


def connect(path: str) -> socket.socket | None:
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        client.connect(path)
    except OSError:
        client.close()
        return None
    return client


def start_zygote(path: str, owner: str) -> socket.socket | None:
    """Connect, starting the zygote first if none listens (one launcher starts it: a lock)."""
    with open(path + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        client = connect(path)
        if client is not None:
            return client
        with open(path + ".log", "ab") as log:  # not the launcher's stderr: a test reads it to EOF
            subprocess.Popen(
                [sys.executable, "-m", "tests.cli_zygote", path, owner], cwd=REPO,
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
            )  # fmt: skip
        until = time.monotonic() + START_TIMEOUT_S
        while client is None and time.monotonic() < until:
            time.sleep(0.05)
            client = connect(path)
        return client


def read_line(client: socket.socket) -> str:
    data = b""
    while not data.endswith(b"\n"):
        chunk = client.recv(64)
        if not chunk:
            return ""
        data += chunk
    return data.decode().strip()


def main() -> None:
    path, owner, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    client = connect(path) or start_zygote(path, owner)
    if client is None:
        fresh(args)
    request = {"argv": args, "env": dict(os.environ), "cwd": os.getcwd()}
    assert client is not None
    socket.send_fds(client, [json.dumps(request).encode() + b"\n"], [0, 1, 2])
    child = read_line(client)
    if child in ("", "fresh"):
        fresh(args)
    pid = int(child)
    for signum in FORWARDED:
        signal.signal(signum, lambda signum, _frame: os.kill(pid, signum))
    status = read_line(client)
    if not status:  # the zygote went away: report it like a killed child
        sys.exit(128 + signal.SIGKILL)
    code = os.waitstatus_to_exitcode(int(status))
    if code < 0:  # killed by a signal: die of the same one
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    sys.exit(code)


if __name__ == "__main__":
    main()
