"""A throwaway PostgreSQL cluster for tests: Debian's `initdb` and `pg_ctl` (scripts/setup.sh
installs them), a unix socket in a temp dir and durability off, so it starts in about a second
and leaves nothing behind. PostgreSQL refuses to run as root: root runs it as a dedicated
system user, created when missing; anyone else runs it as themselves."""

from __future__ import annotations

import itertools
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

import psycopg

from devnet.process import free_port

PG_USER = "unchained-pg"
DEBIAN_BINS = "usr/lib/postgresql/*/bin/pg_ctl"  # under /, one folder per major version
SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "fsync": "off",  # a test cluster never survives a crash; durability only costs time
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "200",  # several market processes and their pools in one test
}


def server_bin() -> Path | None:
    """The folder of `pg_ctl`, `initdb` and `pg_basebackup`: that of `pg_ctl` on PATH (a link
    followed to its version's folder, which has them all), else Debian's newest major version."""
    on_path = shutil.which("pg_ctl")
    if on_path:
        return Path(on_path).resolve().parent
    found = sorted(Path("/").glob(DEBIAN_BINS), key=lambda path: int(path.parts[-3]))
    return found[-1].parent if found else None


def server_user() -> str | None:
    """Who runs the server: a dedicated system user when we are root, else None (ourselves)."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(PG_USER)
    except KeyError:
        command = ["useradd", "--system", "--user-group", "--no-create-home", PG_USER]
        subprocess.run(command, check=True, capture_output=True)
    return PG_USER


class Cluster:
    """One server in a temp folder (data, socket, log) on a free port; a database per test.
    `settings` change the defaults above (a replicated pair turns synchronous_commit on)."""

    def __init__(self, bin_dir: Path, settings: Mapping[str, str] | None = None) -> None:
        self.bin_dir = bin_dir
        self.user = server_user()
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="unchained-pg-"))  # a socket path is <108 B
        self.data = self.root / "data"
        self.settings = {**SETTINGS, **(settings or {})}
        self._names = itertools.count()

    def start(self, source: Cluster | None = None, role: str = "postgres") -> Cluster:
        """initdb (or, from a running `source`, a streaming standby of it: `pg_basebackup -R`
        as `role`, through a replication slot so the source keeps the WAL it has not yet sent),
        our settings, pg_ctl start (waits until it accepts connections)."""
        if self.user is not None:
            entry = pwd.getpwnam(self.user)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        try:
            if source is None:
                self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust",
                          "-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions")  # fmt: skip
            else:
                self._run("pg_basebackup", "-D", str(self.data), "-h", "127.0.0.1",
                          "-p", str(source.port), "-U", role, "-X", "stream", "-R",
                          "--create-slot", f"--slot=standby_{self.port}",
                          "--checkpoint=fast", "--no-sync")  # fmt: skip
            # appended: a standby's copy of its source's file names the source's port and
            # socket folder first, and the last line of a setting is the one that counts
            settings = {**self.settings, "port": str(self.port),
                        "unix_socket_directories": f"'{self.root}'"}  # fmt: skip
            with (self.data / "postgresql.conf").open("a") as conf:
                conf.writelines(f"{name} = {value}\n" for name, value in settings.items())
            self.resume()
        except subprocess.CalledProcessError as exc:
            log = self.root / "server.log"
            detail = log.read_text() if log.exists() else exc.stderr.decode(errors="replace")
            self.stop()
            raise RuntimeError(f"the throwaway PostgreSQL did not start: {exc}\n{detail}") from exc
        return self

    def halt(self) -> None:
        """Stop the server at once, keeping its files (`resume` starts it again): the
        database gone from under its clients, as when its host dies."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def resume(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.root / "server.log"),
                  "-w", "-t", "60", "start")  # fmt: skip

    def stop(self) -> None:
        """Stop at once (nothing in it matters) and remove every file."""
        if (self.data / "postmaster.pid").exists():
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)

    def promote(self) -> None:
        """A standby becomes a primary (`pg_ctl promote` waits until it is one)."""
        self._run("pg_ctl", "-D", str(self.data), "-w", "-t", "60", "promote")

    def query(self, sql: str) -> object:
        """The first value `sql` returns (None: no row, or a statement that returns none), as
        the superuser over the unix socket."""
        with psycopg.connect(host=str(self.root), port=self.port, user="postgres",
                             dbname="postgres", autocommit=True) as connection:  # fmt: skip
            cursor = connection.execute(sql)
            row = cursor.fetchone() if cursor.description else None
        return None if row is None else row[0]

    def url(self, database: str = "postgres") -> str:
        """The SQLAlchemy URL (psycopg 3) of `database`, over the unix socket."""
        return f"postgresql+psycopg://postgres@/{database}?host={self.root}&port={self.port}"

    def new_database(self) -> str:
        """A new empty database's URL: each test gets its own while the server stays up."""
        return self.url(self.create_database())

    def create_database(self) -> str:
        """A new empty database; its name."""
        name = f"test_{next(self._names)}"
        self.query(f'CREATE DATABASE "{name}"')
        return name

    def _run(self, program: str, *args: str) -> None:
        """A server program, as the server's user, in the cluster's folder."""
        environment = {"LC_ALL": "C", "PATH": os.environ.get("PATH", "")}
        subprocess.run([str(self.bin_dir / program), *args], check=True, capture_output=True,
                       cwd=self.root, user=self.user, group=self.user, env=environment)  # fmt: skip
