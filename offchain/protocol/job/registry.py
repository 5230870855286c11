"""Image references against a registry: which exact image (manifest digest) a tag names now.

A renter pays for exactly the image it named, so a spec that names a registry's tag
(`host[:port]/repo:tag`) is pinned to that tag's digest when it is quoted
(`host/repo@sha256:...`), and the pin is what the escrow's job id digests and what the provider
pulls (docker checks the manifest's bytes against the digest as it pulls). The registry is read
through its HTTP API v2: a HEAD of the manifest with the Docker and OCI media types accepted,
answered with `Docker-Content-Digest` (or, when a registry leaves that header out, the sha256 of
the manifest's bytes). http for loopback hosts (a local registry, as docker itself allows), https
otherwise; no credentials (a registry asking for them is named as such).

A reference without a registry host (`unchained/python-numpy:latest`, `python:3.11`) is not
resolved: it names an image the provider has on its machine (its offer lists them), or Docker
Hub's for a provider that pulls. `pinned` leaves it as written.
"""

from __future__ import annotations

import dataclasses
import hashlib
import ipaddress
import re

import httpx

from offchain.core.errors import UnchainedError

MANIFEST_TYPES = (
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.oci.image.index.v1+json",
)
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
TIMEOUT_S = 10.0
MAX_MANIFEST_BYTES = 4 << 20  # read when a registry names no digest: manifests are KiBs


class RegistryError(UnchainedError):
    """The registry could not say which image a reference names; the message says why."""


@dataclasses.dataclass(frozen=True)
class ImageName:
    """A reference's parts as docker reads them: `host` is None when it names no registry."""

    host: str | None
    repository: str
    tag: str | None
    digest: str | None

    @classmethod
    def parse(cls, reference: str) -> ImageName:
        name, _, digest = reference.partition("@")
        last = name.rsplit("/", 1)[-1]
        tag = last.partition(":")[2] if ":" in last else None
        name = name.removesuffix(f":{tag}") if tag is not None else name
        first, _, rest = name.partition("/")
        is_host = rest and ("." in first or ":" in first or first == "localhost")
        host = first if is_host else None
        return cls(host, rest if is_host else name, tag, digest or None)

    def pinned(self, digest: str) -> str:
        """This image by `digest`, its tag dropped: `host/repo@sha256:...`."""
        host = f"{self.host}/" if self.host else ""
        return f"{host}{self.repository}@{digest}"

    def manifest_url(self) -> str:
        assert self.host is not None
        scheme = "http" if is_loopback(self.host) else "https"
        wanted = self.digest or self.tag or "latest"
        return f"{scheme}://{self.host}/v2/{self.repository}/manifests/{wanted}"


def is_loopback(host: str) -> bool:
    """localhost or 127.0.0.0/8 (with or without a port): a registry on this machine."""
    name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name.strip("[]")).is_loopback
    except ValueError:
        return False


def names_registry(reference: str) -> bool:
    """Whether `reference` names a registry host (only those are resolved)."""
    return ImageName.parse(reference).host is not None


def resolve(reference: str, timeout_s: float = TIMEOUT_S) -> str:
    """`host/repo@sha256:...` for `reference` (a tag, or a digest the registry must hold), as
    the registry answers now; RegistryError naming the reference and why not otherwise."""
    name = ImageName.parse(reference)
    if name.host is None:
        raise RegistryError(f"{reference} names no registry host, so no registry can pin it")
    url = name.manifest_url()
    what = f"digest {name.digest}" if name.digest else f"tag {name.tag or 'latest'}"
    headers = {"Accept": ", ".join(MANIFEST_TYPES)}
    try:
        with httpx.Client(timeout=timeout_s, follow_redirects=False) as http:
            answer = http.head(url, headers=headers)
            digest = answer.headers.get("Docker-Content-Digest")
            if answer.status_code == 200 and not digest:
                answer = http.get(url, headers=headers)
                digest = _body_digest(answer)
    except httpx.HTTPError as exc:
        raise RegistryError(f"registry {name.host} is unreachable ({url}): {exc}") from exc
    if answer.status_code == 404:
        raise RegistryError(f"registry {name.host} has no {what} of {name.repository}")
    if answer.status_code in (401, 403):
        raise RegistryError(
            f"registry {name.host} asks for credentials to read {name.repository}; only public "
            "images can be pinned"
        )
    if answer.status_code != 200 or not digest:
        raise RegistryError(
            f"{name.host} did not answer as a registry for {reference} (HTTP "
            f"{answer.status_code} to {url}, no manifest digest)"
        )
    if not DIGEST.fullmatch(digest):
        raise RegistryError(f"registry {name.host} named a digest this cannot check: {digest}")
    if name.digest and digest != name.digest:
        raise RegistryError(
            f"registry {name.host} answers {digest} for {reference}: not the image named"
        )
    return name.pinned(digest)


def _body_digest(answer: httpx.Response) -> str | None:
    """The sha256 of a manifest the registry served without naming its digest."""
    kind = answer.headers.get("Content-Type", "").split(";")[0].strip()
    if answer.status_code != 200 or kind not in MANIFEST_TYPES:
        return None
    if len(answer.content) > MAX_MANIFEST_BYTES:
        return None
    return "sha256:" + hashlib.sha256(answer.content).hexdigest()


def pinned(reference: str, timeout_s: float = TIMEOUT_S) -> str:
    """`reference` pinned to its registry's digest now; one without a registry host as it is."""
    return resolve(reference, timeout_s) if names_registry(reference) else reference
