"""Debian packages added to one of our images without network inside the build: this
machine's apt resolves what the packages need beyond the image's own dpkg status and downloads
those .deb files, and `dpkg -i` installs them (and then a recipe's own script) as root in a
container of the image that is then committed. Used by the pod image (openssh-server) and the
PyTorch image (python3-torch)."""

from __future__ import annotations

import io
import subprocess
import tarfile
import tempfile
from collections.abc import Mapping
from pathlib import Path

import docker

from offchain.core.errors import UnchainedError

BUILD_TIMEOUT_S = 900  # python3-torch is 316 packages, 231 MB
DEBS_FOLDER = "/tmp/debs"
INSTALL_DEBS = f"""\
set -e
DEBIAN_FRONTEND=noninteractive dpkg -i {DEBS_FOLDER}/*.deb >/dev/null
rm -rf {DEBS_FOLDER} /var/cache/debconf/*-old
"""


class LayerError(UnchainedError, RuntimeError):
    """The packages could not be added (apt could not download, dpkg or the script failed)."""


def commit_with_packages(
    client: docker.DockerClient,
    base: str,
    packages: tuple[str, ...],
    reference: str,
    changes: list[str],
    script: str = "",
    files: Mapping[str, tuple[bytes, int]] | None = None,
    environment: Mapping[str, str] | None = None,
) -> None:
    """`base` with `packages` installed, `files` (path: (bytes, mode)) written and `script`
    run (sh, as root, with `environment`) after dpkg, committed as `reference` with `changes`."""
    holder = client.containers.create(
        base, ["sh", "-c", INSTALL_DEBS + script], user="0:0", network_mode="none",
        environment=dict(environment or {}),
    )  # fmt: skip
    try:
        entries = {f"{DEBS_FOLDER}/{name}": (data, 0o644)
                   for name, data in debs_for(client, base, packages).items()}  # fmt: skip
        holder.put_archive("/", tar_of({**entries, **(files or {})}, folders=(DEBS_FOLDER,)))
        holder.start()
        status = holder.wait(timeout=BUILD_TIMEOUT_S)
        if status["StatusCode"]:
            output = holder.logs().decode(errors="replace")[-2000:]
            raise LayerError(f"installing {', '.join(packages)} failed:\n{output}")
        repository, tag = reference.rsplit(":", 1)
        holder.commit(repository=repository, tag=tag, changes=changes)
    finally:
        holder.remove(force=True)


def debs_for(client: docker.DockerClient, base: str, packages: tuple[str, ...]) -> dict[str, bytes]:
    """The .deb files `packages` need on top of `base`, by file name: resolved and downloaded
    by this machine's apt against `base`'s own dpkg status (its lists refreshed once if a
    download fails: they may be older than the mirror)."""
    with tempfile.TemporaryDirectory(prefix="unchained-debs-") as scratch:
        folder = Path(scratch)
        status = folder / "status"
        status.write_bytes(file_of(client, base, "/var/lib/dpkg/status"))
        archives = folder / "archives"
        (archives / "partial").mkdir(parents=True)
        command = [
            "apt-get", "install", "--download-only", "--no-install-recommends", "-y", "-q",
            "-o", f"Dir::State::status={status}", "-o", f"Dir::Cache::archives={archives}",
            "-o", "Debug::NoLocking=1", *packages,
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode:
            subprocess.run(["apt-get", "update", "-qq"], capture_output=True)
            done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode:
            raise LayerError(f"apt could not download {', '.join(packages)}:\n"
                             f"{(done.stdout + done.stderr)[-2000:]}")  # fmt: skip
        return {deb.name: deb.read_bytes() for deb in sorted(archives.glob("*.deb"))}


def file_of(client: docker.DockerClient, image: str, path: str) -> bytes:
    """One file of `image`, read from a container that is never started."""
    holder = client.containers.create(image, ["true"], network_mode="none")
    try:
        stream, _ = holder.get_archive(path)
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
            member = tar.next()
            extracted = tar.extractfile(member) if member is not None else None
            if extracted is None:
                raise LayerError(f"{image} has no file {path}")
            return extracted.read()
    finally:
        holder.remove(force=True)


def tar_of(files: Mapping[str, tuple[bytes, int]], folders: tuple[str, ...] = ()) -> bytes:
    """A tar of `folders` (0755, made first) and `files` (absolute path: (bytes, mode)); the
    folders above them are left out, so that the image's own keep their modes (/tmp's 1777)."""
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        for folder in folders:
            info = tarfile.TarInfo(folder.lstrip("/"))
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for path, (data, mode) in files.items():
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    return archive.getvalue()
