"""/out for one job: an ext4 filesystem of exactly the job's disk size, loop-mounted on the host.

Docker cannot cap a volume's size on ext4 (quotas need xfs), so the job writes into a sparse
image file of `disk_mib` and hits ENOSPC there, never on the host's disk. The filesystem is
made owned by the job's user (mkfs sets it: no helper container), bound into the container at
/out, and read on the host after exit, where it is packed into a deterministic tar archive.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, BinaryIO, cast

from offchain.core.errors import UnchainedError


class OutputTooLarge(UnchainedError, ValueError):
    """/out holds more than its filesystem's size in file content (sparse files can)."""


@dataclass(frozen=True)
class Archive:
    path: Path
    sha256: str
    size_bytes: int


class _HashingWriter:
    """A write-only file that hashes and counts what passes through it."""

    def __init__(self, sink: BinaryIO) -> None:
        self.sink = sink
        self.hash = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.hash.update(data)
        self.size += len(data)
        return self.sink.write(data)


def _run(*command: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        raise OSError(f"{' '.join(command)} failed: {done.stderr.strip()}")


def is_mounted(path: Path) -> bool:
    target = str(path.resolve())
    with open("/proc/self/mounts") as mounts:
        return any(line.split()[1] == target for line in mounts)


class OutVolume:
    """The image file and its mountpoint inside a job's workspace."""

    def __init__(self, workspace: Path) -> None:
        self.image = workspace / "out.img"
        self.mountpoint = workspace / "out"

    def create(self, size_mib: int, uid: int, gid: int) -> None:
        """Make the filesystem and mount it (the mountpoint must exist before: docker checks)."""
        with open(self.image, "wb") as image:
            image.truncate(size_mib << 20)
        _run(
            "mkfs.ext4", "-q", "-F", "-m", "0", "-O", "^has_journal",
            "-E", f"root_owner={uid}:{gid},lazy_itable_init=1", str(self.image),
        )  # fmt: skip
        self.mount()
        (self.mountpoint / "lost+found").rmdir()  # mkfs's, not the job's

    def mount(self) -> None:
        _run("mount", "-o", "loop,nosuid,nodev", str(self.image), str(self.mountpoint))

    def pack(self, destination: Path, max_bytes: int) -> Archive:
        """Tar /out's content (sorted, owners and times normalised) and hash it in one pass.

        Sparse files can claim more than the filesystem holds; the archive is refused (and
        removed) beyond `max_bytes` of file content, so no job can fill the host's disk with it.
        """
        try:
            return self._pack(destination, max_bytes)
        except OutputTooLarge:
            destination.unlink()
            raise

    def _pack(self, destination: Path, max_bytes: int) -> Archive:
        content_bytes = 0
        with open(destination, "wb") as sink:
            writer = _HashingWriter(sink)
            # stream mode only writes; typeshed asks any fileobj for a whole file's methods
            stream = cast(IO[bytes], writer)
            with tarfile.open(fileobj=stream, mode="w|", format=tarfile.PAX_FORMAT) as tar:
                for path in self._walk():
                    info = tar.gettarinfo(str(path), arcname=str(path.relative_to(self.mountpoint)))
                    if info is None:  # sockets: nothing to keep
                        continue
                    info.uid = info.gid = 0
                    info.uname = info.gname = ""
                    info.mtime = 0
                    if info.isreg():
                        content_bytes += info.size
                        if content_bytes > max_bytes:
                            raise OutputTooLarge(
                                f"/out holds more than {max_bytes} bytes of file content"
                            )
                        with open(path, "rb") as content:
                            tar.addfile(info, content)
                    else:
                        tar.addfile(info)
        return Archive(destination, writer.hash.hexdigest(), writer.size)

    def seed(self, archive: Path, uid: int, gid: int) -> None:
        """Fill the mounted /out from `archive` (a checkpoint `pack` made of another run), owned
        by the job's user. Its content was the job's, so it is read as untrusted: tarfile's
        `data` filter refuses links and paths that leave /out and clears special bits."""

        def owned(member: tarfile.TarInfo, destination: str) -> tarfile.TarInfo:
            kept = tarfile.data_filter(member, destination)
            return kept.replace(uid=uid, gid=gid, uname="", gname="", deep=False)

        with tarfile.open(archive) as tar:
            tar.extractall(self.mountpoint, filter=owned)

    def _walk(self) -> list[Path]:
        """Every entry under /out, parents before children, in a fixed order; links not followed."""
        entries = []
        for directory, dirs, files in os.walk(self.mountpoint):
            dirs.sort()
            for name in sorted(dirs + files):
                entries.append(Path(directory) / name)
        return entries

    def remove(self) -> None:
        """Unmount (which frees the loop device) and delete; safe to call at any stage."""
        if is_mounted(self.mountpoint):
            _run("umount", str(self.mountpoint))
        self.image.unlink(missing_ok=True)
        if self.mountpoint.is_dir():
            self.mountpoint.rmdir()
