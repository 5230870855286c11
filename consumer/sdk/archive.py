"""Unpacking a verified result archive. The sha256 check says the provider signed this archive,
not that it is well made: a provider (or its job's program, which chose the names in /out)
can put absolute paths, `..`, links out of the folder, devices, a corrupt header or more than
fits on the disk in it, or compress it to expand without bound (only a plain tar is unpacked).
Each is refused with UnpackRefused saying what and where the archive is; nothing is left half
unpacked under a name that looks complete (the members go into a hidden sibling folder,
renamed to `out/` once all are written, removed otherwise)."""

from __future__ import annotations

import shutil
import tarfile
from pathlib import Path

from consumer.sdk.errors import UnpackRefused

MAX_MEMBERS = 100_000  # far beyond a job's /out; a bound on the files and inodes it may make
# What a malformed or hostile archive raises while it is read or written: tarfile's own errors
# (the `data` filter's refusals among them), a file system that refuses a name or is full,
# a hard link to a member that is not there (KeyError).
UNPACK_ERRORS = (tarfile.TarError, OSError, KeyError)


def unpack_archive(archive: Path, into: Path) -> Path | None:
    """Unpack a verified tar archive into `into` with tarfile's `data` filter (no links out of
    `into`, no devices or set-id bits; absolute names refused) within MAX_MEMBERS and the
    destination's free space; None when it is not an uncompressed tar (it stays as it arrived:
    a provider's /out is a plain tar, and a compressed one could expand without bound)."""
    if not plain_tar(archive):
        return None
    partial = into.with_name(f".{into.name}.part")
    shutil.rmtree(partial, ignore_errors=True)  # left by a run that was killed
    try:
        partial.mkdir(parents=True)
        with tarfile.open(archive, "r:") as tar:
            check_size(tar, partial)
            tar.extractall(partial, filter=strict_data)
    except UNPACK_ERRORS as exc:
        shutil.rmtree(partial, ignore_errors=True)
        raise refused(archive, into, exc) from exc
    if into.is_symlink() or into.is_file():  # never followed: what it points to is not ours
        into.unlink()
    elif into.exists():
        shutil.rmtree(into)
    partial.rename(into)
    return into


def plain_tar(archive: Path) -> bool:
    """Whether `archive` opens as an uncompressed tar (its first header reads)."""
    try:
        with tarfile.open(archive, "r:"):
            return True
    except tarfile.ReadError:
        return False


def strict_data(member: tarfile.TarInfo, path: str) -> tarfile.TarInfo | None:
    """tarfile's `data` filter, which strips a leading `/`, refusing an absolute name instead:
    a job's /out has none, so one is a made archive, and its other members are not trusted."""
    if member.name.startswith("/"):
        raise tarfile.AbsolutePathError(member)
    return tarfile.data_filter(member, path)


def check_size(tar: tarfile.TarFile, into: Path) -> None:
    """UnpackRefused before anything is written when the archive holds more members than
    MAX_MEMBERS or more bytes than `into`'s file system has free (only the headers are read)."""
    members = size = 0
    for member in tar:
        members += 1
        size += member.size
        if members > MAX_MEMBERS:
            raise tarfile.TarError(f"more than {MAX_MEMBERS} members")
    free = shutil.disk_usage(into).free
    if size > free:
        raise tarfile.TarError(f"its {members} members hold {size} bytes; {free} are free here")


def refused(archive: Path, into: Path, exc: BaseException) -> UnpackRefused:
    reason = str(exc) or type(exc).__name__
    return UnpackRefused(
        f"the result archive is the one the provider signed, but it cannot be unpacked safely: "
        f"{reason}; nothing was unpacked into {into} (the archive is kept at {archive}: "
        "inspect it with `tar -tvf`)",
        archive=str(archive), out=str(into), reason=reason,
    )  # fmt: skip
