"""The CLI zygote behind tests/cli_launch.py: one per pytest worker, it imports the heavy
third-party libraries once (pycardano with ogmios, pydantic and typeguard: ~2 s of CPU that
every `python -m unchained.cli` pays again), then for each launcher forks a child that takes
the launcher's stdio, argv, environment and working directory and runs `unchained.cli` as
`__main__`, ending as an interpreter ends (atexit, flushed streams). None of the project's own
modules is imported before the fork, so each command reads its settings fresh. A request whose
interpreter settings (PYTHON*, LANG, LC_*) differ from the zygote's is sent back to run in a
fresh interpreter. The zygote exits with the pytest worker that owns it.

Usage: python -m tests.cli_zygote SOCKET OWNER_PID"""

from __future__ import annotations

import gc
import importlib
import io
import json
import os
import runpy
import select
import selectors
import signal
import socket
import sys
from typing import Any, TextIO

PRELOADED = ("pycardano", "cbor2", "httpx", "websockets", "typer", "rich", "yaml", "pydantic")


def interpreter_settings(env: dict[str, str]) -> dict[str, str]:
    """What decides how an interpreter starts (its path, encodings, flags)."""
    return {k: v for k, v in env.items() if k.startswith(("PYTHON", "LC_")) or k == "LANG"}


def receive(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
    data, fds, _flags, _addr = socket.recv_fds(conn, 1 << 20, 3)
    while not data.endswith(b"\n"):
        more = conn.recv(1 << 20)
        if not more:
            raise ConnectionError("the launcher went away")
        data += more
    return json.loads(data), fds


def stdio(fd: int, reading: bool, like: TextIO | None) -> io.TextIOWrapper:
    """A standard stream on `fd` as a starting interpreter makes it (line-buffered on a tty)."""
    raw = io.FileIO(fd, "rb" if reading else "wb", closefd=False)
    buffered = io.BufferedReader(raw) if reading else io.BufferedWriter(raw)
    return io.TextIOWrapper(
        buffered, encoding=like.encoding if like else None, errors=like.errors if like else None,
        newline="\n",
        line_buffering=not reading and (fd == 2 or raw.isatty()),
    )  # fmt: skip


def become(request: dict[str, Any], fds: list[int]) -> None:
    """In the forked child: take on the launcher's stdio, environment, directory and argv."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = ["unchained", *request["argv"]]  # runpy puts the module's path first
    sys.path[0] = request["cwd"]  # `python -m` puts the working directory first
    sys.stdin = sys.__stdin__ = stdio(0, True, sys.__stdin__)  # type: ignore[misc]
    sys.stdout = sys.__stdout__ = stdio(1, False, sys.__stdout__)  # type: ignore[misc]
    sys.stderr = sys.__stderr__ = stdio(2, False, sys.__stderr__)  # type: ignore[misc]


def supervise(
    conn: socket.socket, request: dict[str, Any], fds: list[int]
) -> dict[str, Any] | None:
    """In the zygote's fork for one request: fork the command's child, tell the launcher its
    pid, wait for it and report its wait status; kill it if the launcher goes away first.
    Returns the request in the command's child."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    child = os.fork()
    if child == 0:
        conn.close()
        become(request, fds)
        return request
    for fd in fds:
        os.close(fd)
    conn.sendall(f"{child}\n".encode())
    exited = os.pidfd_open(child)
    ready, _, _ = select.select([conn.fileno(), exited], [], [])
    if exited not in ready:  # the launcher died (killed on a timeout): so does its command
        signal.pidfd_send_signal(exited, signal.SIGKILL)
    _, status = os.waitpid(child, 0)
    try:
        conn.sendall(f"{status}\n".encode())
    finally:
        os._exit(0)


def clean_up(path: str) -> None:
    """The socket, its lock and an empty log (a log with text is kept: it tells why)."""
    for name in (path, path + ".lock", path + ".log"):
        if name.endswith(".log") and os.path.getsize(name):
            continue
        os.unlink(name)


def serve(path: str, owner: int) -> dict[str, Any] | None:
    """Listen, import, then fork per request until the owner exits. Returns (in a command's
    child) the request to run."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if os.path.exists(path):  # a dead zygote's (its launcher found none listening)
        os.unlink(path)
    listener.bind(path)
    listener.listen(64)  # launchers queue while the imports run
    for name in PRELOADED:
        importlib.import_module(name)
    mine = interpreter_settings(dict(os.environ))
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the supervisors reap themselves
    events = selectors.DefaultSelector()
    events.register(listener, selectors.EVENT_READ)
    owner_exit = os.pidfd_open(owner)
    events.register(owner_exit, selectors.EVENT_READ)
    sys.stdout.flush()
    sys.stderr.flush()
    gc.freeze()  # the imported objects stay shared with the children (not copied, not scanned)
    while True:
        for key, _ in events.select():
            if key.fileobj is not listener:  # the owner exited
                clean_up(path)
                return None
            conn, _ = listener.accept()
            try:
                request, fds = receive(conn)
            except (ConnectionError, ValueError):
                conn.close()
                continue
            if interpreter_settings(request["env"]) != mine or len(fds) != 3:
                conn.sendall(b"fresh\n")
                for fd in fds:
                    os.close(fd)
                conn.close()
                continue
            if os.fork() == 0:
                events.close()
                listener.close()
                os.close(owner_exit)
                return supervise(conn, request, fds)
            conn.close()
            for fd in fds:
                os.close(fd)


if __name__ == "__main__":
    command = serve(sys.argv[1], int(sys.argv[2]))
    if command is not None:
        runpy.run_module("unchained.cli", run_name="__main__", alter_sys=True)
