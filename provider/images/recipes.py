"""Images for the provider's tests, self-test and demo, built here from Debian packages (no
registry needed) and kept in the engine under a tag derived from what went into them, so
each is built once per machine.

- busybox: FROM scratch with the static busybox and its applet links (milliseconds to build);
- python: a debootstrap (minbase) root filesystem with python3 and NumPy (about a minute);
- workloads: the python image plus `provider/images/workloads/` at /opt/unchained/workloads;
- the sample services the tests, benchmarks and demo start are built on these in
  `samples/images.py`.

The python image is also tagged `PYTHON_EXAMPLE` (a name that does not change with its recipe),
the image the spec `unchained job init` writes runs in. `local_images` is what an offer lists:
tags and the digests of images pulled from (or pushed to) a registry. `pull` fetches a missing
image, and one named by digest only if the engine then holds exactly that digest.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import io
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import docker
from docker.errors import DockerException, ImageNotFound
from pydantic import ValidationError

from offchain.core.errors import UnchainedError
from offchain.protocol.job.offer import MAX_IMAGES, OfferedImage, normal_image
from offchain.protocol.job.registry import familiar, qualified, registry_host

BUSYBOX_REPOSITORY = "unchained/busybox"
PYTHON_REPOSITORY = "unchained/python-numpy"
PYTHON_EXAMPLE = f"{PYTHON_REPOSITORY}:latest"
WORKLOADS_REPOSITORY = "unchained/workloads"
WORKLOADS_DIR = Path(__file__).parent / "workloads"
WORKLOADS_IN_IMAGE = "/opt/unchained/workloads"
DEBIAN_SUITE = "bookworm"
DEBIAN_PACKAGES = ("python3-minimal", "python3-numpy")
TRIMMED = ("var/cache/apt", "var/lib/apt/lists", "usr/share/doc", "usr/share/man",
           "usr/share/locale", "usr/share/info")  # fmt: skip
PATH_ENV = "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PYTHON_CHANGES = [PATH_ENV, "ENV LANG=C.UTF-8", "ENV PYTHONDONTWRITEBYTECODE=1",
                  'CMD ["python3"]']  # fmt: skip
RECIPE_VERSION = b"1"  # bump when a recipe changes in a way its inputs do not show


def content_tag(*parts: bytes) -> str:
    digest = hashlib.sha256(RECIPE_VERSION)
    for part in parts:
        digest.update(hashlib.sha256(part).digest())
    return digest.hexdigest()[:16]


def _present(client: docker.DockerClient, reference: str) -> bool:
    try:
        client.images.get(reference)
        return True
    except ImageNotFound:
        return False


@contextmanager
def _build_lock() -> Iterator[None]:
    """One builder per machine at a time (tests, self-test and demo may start together)."""
    with open(Path(tempfile.gettempdir()) / "unchained-images.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def cached(client: docker.DockerClient, reference: str, build: Callable[[], None]) -> str:
    if not _present(client, reference):
        with _build_lock():
            if not _present(client, reference):
                build()
    return reference


def busybox_image(client: docker.DockerClient) -> str:
    busybox = Path(shutil.which("busybox") or "/bin/busybox")
    binary = busybox.read_bytes()
    repository, tag = BUSYBOX_REPOSITORY, content_tag(binary)

    def build() -> None:
        applets = subprocess.run(
            [str(busybox), "--list-full"], capture_output=True, text=True, check=True
        ).stdout.split()
        archive = io.BytesIO()
        with tarfile.open(fileobj=archive, mode="w") as tar:
            for directory in ("bin", "sbin", "usr", "usr/bin", "usr/sbin", "etc"):
                info = tarfile.TarInfo(directory)
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            info = tarfile.TarInfo("bin/busybox")
            info.size, info.mode = len(binary), 0o755
            tar.addfile(info, io.BytesIO(binary))
            for applet in applets:
                if applet != "bin/busybox":
                    link = tarfile.TarInfo(applet)
                    link.type, link.linkname = tarfile.SYMTYPE, "/bin/busybox"
                    tar.addfile(link)
        client.api.import_image_from_data(
            archive.getvalue(), repository=repository, tag=tag, changes=[PATH_ENV, 'CMD ["sh"]']
        )

    return cached(client, f"{repository}:{tag}", build)


def python_image(client: docker.DockerClient) -> str:
    """Debian minbase with python3 and NumPy; root is needed to debootstrap."""
    recipe = " ".join((DEBIAN_SUITE, *DEBIAN_PACKAGES, *TRIMMED, *PYTHON_CHANGES)).encode()
    repository, tag = PYTHON_REPOSITORY, content_tag(recipe)

    def build() -> None:
        with tempfile.TemporaryDirectory(prefix="unchained-rootfs-") as scratch:
            root = Path(scratch) / "root"
            try:
                done = subprocess.run(
                    ["debootstrap", "--variant=minbase", f"--include={','.join(DEBIAN_PACKAGES)}",
                     DEBIAN_SUITE, str(root)],
                    capture_output=True, text=True,
                )  # fmt: skip
            finally:
                _unmount_below(root)  # a failed debootstrap can leave /proc mounted inside
            if done.returncode:
                raise RuntimeError(f"debootstrap failed:\n{(done.stdout + done.stderr)[-2000:]}")
            for trimmed in TRIMMED:
                shutil.rmtree(root / trimmed, ignore_errors=True)
            archive = Path(scratch) / "root.tar"
            subprocess.run(["tar", "-C", str(root), "-cf", str(archive), "."], check=True)
            client.api.import_image_from_file(
                str(archive), repository=repository, tag=tag, changes=PYTHON_CHANGES
            )

    reference = cached(client, f"{repository}:{tag}", build)
    client.images.get(reference).tag(*PYTHON_EXAMPLE.split(":"))
    return reference


def workloads_image(client: docker.DockerClient) -> str:
    """The python image with this package's workload scripts added on top."""
    scripts = sorted(WORKLOADS_DIR.glob("*.py"))
    return python_with(client, WORKLOADS_REPOSITORY, WORKLOADS_IN_IMAGE, scripts, PYTHON_CHANGES)


def python_with(
    client: docker.DockerClient,
    repository: str,
    folder: str,
    files: list[Path],
    changes: list[str],
    base: str | None = None,
) -> str:
    """The python image (or `base`, built on it) with `files` added in `folder` and `changes`
    (ENV, CMD...) applied, tagged by all of them: rebuilt only when one changes."""
    base = base or python_image(client)
    parts = [base.encode(), *(c.encode() for c in changes if c not in PYTHON_CHANGES)]
    parts += [p.name.encode() + b"\0" + p.read_bytes() for p in files]
    tag = content_tag(*parts)

    def build() -> None:
        archive = io.BytesIO()
        with tarfile.open(fileobj=archive, mode="w") as tar:
            add_folders(tar, folder)
            for file in files:
                tar.add(str(file), arcname=f"{folder.strip('/')}/{file.name}")
        commit(client, base, archive.getvalue(), repository, tag, changes)

    return cached(client, f"{repository}:{tag}", build)


def add_folders(tar: tarfile.TarFile, folder: str) -> None:
    """`folder` and each folder above it, as directory entries (0755)."""
    folders = Path(folder.strip("/")).parts
    for depth in range(1, len(folders) + 1):
        info = tarfile.TarInfo("/".join(folders[:depth]))
        info.type, info.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(info)


def commit(
    client: docker.DockerClient,
    base: str,
    archive: bytes,
    repository: str,
    tag: str,
    changes: list[str],
) -> None:
    """`base` with the tar `archive` unpacked at / and `changes` applied, as repository:tag."""
    holder = client.containers.create(base, ["true"])  # never started: a filesystem to fill
    try:
        holder.put_archive("/", archive)
        holder.commit(repository=repository, tag=tag, changes=changes)
    finally:
        holder.remove(force=True)


@functools.cache
def engine_default(client: docker.DockerClient) -> str | None:
    """The engine's default registry (its IndexServerAddress), read once per client: an
    offer's listing asks for it on every acceptance check, and it does not change."""
    return registry_host(client.info().get("IndexServerAddress") or "") or None


def local_images(client: docker.DockerClient) -> list[OfferedImage]:
    """The engine's tagged images and their registry digests (`host/repo@sha256:...`: a spec
    naming one runs without a pull) as an offer lists them, with the image id, sorted; a
    digest of the engine's default registry also as a market pins it, with that registry's
    host (`qualified`); a reference an offer cannot carry (not one the job spec accepts) is
    left out."""
    default = engine_default(client)
    found = []
    for image in client.images.list():
        digests = image.attrs.get("RepoDigests") or ()
        pinned = [qualified(d, default) for d in digests] if default else []
        for reference in (*image.tags, *digests, *(p for p in pinned if p)):
            try:
                found.append(OfferedImage(reference=reference, digest=image.id))
            except ValidationError:
                continue
    return sorted(found, key=lambda image: image.reference)[:MAX_IMAGES]


class PullError(UnchainedError):
    """What the registry served is not the image named."""


def pull(client: docker.DockerClient, reference: str, auth: dict[str, str] | None = None) -> str:
    """Pull `reference` into the engine, as the registry account `auth` (docker's auth_config:
    a renter's, for its private image, given to this pull only) when there is one; its image
    id. One named by digest must come back with that digest among the image's RepoDigests
    (docker checks the manifest against the digest as it pulls; this checks that the engine
    filed it under that digest): otherwise the pulled reference is dropped and PullError says
    so. The engine's refusals are DockerException."""
    image = client.images.pull(reference, auth_config=auth)
    if by_digest(reference) and not has_digest(image.attrs, reference, engine_default(client)):
        with suppress(DockerException):
            client.images.remove(reference)
        raise PullError(
            f"the registry served an image whose digests are {image.attrs.get('RepoDigests')}, "
            f"not {reference}"
        )
    return str(image.id)


def by_digest(reference: str) -> bool:
    return "@sha256:" in reference


def has_digest(attrs: dict[str, Any], reference: str, default_host: str | None = None) -> bool:
    """Whether an image's inspect `attrs` list `reference` (`repo@sha256:...`) as a digest; one
    in the engine's default registry (`default_host`, its IndexServerAddress) is listed as
    docker lists those, without the host (`familiar`)."""
    wanted = normal_image(familiar(reference, default_host))
    return wanted in {normal_image(d) for d in attrs.get("RepoDigests") or ()}


def _unmount_below(root: Path) -> None:
    with open("/proc/self/mounts") as mounts:
        targets = [line.split()[1] for line in mounts]
    for target in sorted((t for t in targets if t.startswith(f"{root}/")), reverse=True):
        subprocess.run(["umount", "-l", target], check=False)
