"""Image references against a registry: which exact image (manifest digest) a tag names now.

A renter pays for exactly the image it named, so a spec that names a registry's tag
(`host[:port]/repo:tag`) is pinned to that tag's digest when it is quoted
(`host/repo@sha256:...`), and the pin is what the escrow's job id digests and what the provider
pulls (docker checks the manifest's bytes against the digest as it pulls). The registry is read
through its HTTP API v2: a GET of the manifest with the Docker and OCI media types accepted,
behind the bearer-token challenge (`registry_auth`: anonymous, or with a renter's credentials
for a private image). The digest is the sha256 of the manifest's bytes, and a registry whose
`Docker-Content-Digest` or served bytes contradict the digest asked is refused. http for
loopback hosts (a local registry, as docker itself allows), https otherwise.

A bare name (`python:3.12`, `pytorch/pytorch:TAG`) is read as docker reads it: in the default
registry, one-part names under `library/`, the tag `latest` when none is named. No default is
built in: a market or renter names it (`default_registry`, or `engine` to take the one the local
docker engine uses, its `IndexServerAddress`). Without one a bare name is not resolved: it names
an image the provider has on its machine (its offer lists them), and `pinned` leaves it as
written; `resolve` says what to set.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import re
from urllib.parse import urlsplit

import httpx

from offchain.core.errors import UnchainedError
from offchain.protocol.job import registry_auth
from offchain.protocol.job.registry_auth import (
    Credentials,
    CredentialsRefused,
    RegistryAuthError,
    is_loopback,
)

MANIFEST_TYPES = (
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.oci.image.index.v1+json",
)
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
TIMEOUT_S = 10.0
MAX_MANIFEST_BYTES = 4 << 20  # manifests are KiBs


OFFICIAL = "library/"  # where docker files a one-part name in the default registry
ENGINE = "engine"  # a default_registry that means: the one the local docker engine uses
__all__ = ["Credentials", "is_loopback"]  # re-exported: callers name images and accounts here


class RegistryError(UnchainedError):
    """The registry could not say which image a reference names; the message says why."""


class NotInRegistry(RegistryError):
    """The registry answered that it holds no such tag or digest."""


class NeedsCredentials(RegistryError):
    """The registry serves this repository only to an account (a private image)."""


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


def registry_host(address: str) -> str:
    """`host[:port]` of a registry written as an operator writes it (`host:5000`) or as docker's
    engine names its index (`https://host/v1/`)."""
    text = address.strip()
    if "://" in text:
        text = urlsplit(text).netloc
    return text.strip("/").split("/")[0]


@functools.cache
def engine_registry() -> str | None:
    """The default registry of the local docker engine (`IndexServerAddress`), or None when no
    engine answers: docker's own default, read where docker keeps it (once a process: an
    engine's default does not change while it runs)."""
    import docker
    from docker.errors import DockerException

    try:
        client = docker.from_env(timeout=5)
        try:
            address = client.info().get("IndexServerAddress")
        finally:
            client.close()
    except DockerException:
        return None
    return registry_host(address) if address else None


def default_host(setting: str | None) -> str | None:
    """The registry a bare name is read in, for a `default_registry` setting: none (empty),
    the local engine's (`engine`), or the host named."""
    if not setting:
        return None
    return engine_registry() if setting == ENGINE else registry_host(setting)


def familiar(reference: str, default_host: str | None) -> str:
    """`reference` as docker lists an image of its default registry (`default_host`): without
    that host, and one-part names without `library/` (`host/library/python@...` is
    `python@...`); any other reference as it is."""
    if default_host and reference.startswith(f"{default_host}/"):
        return reference.removeprefix(f"{default_host}/").removeprefix(OFFICIAL)
    return reference


def qualified(reference: str, default_host: str) -> str | None:
    """A digest reference docker lists without a host (`python@sha256:...`: an image of its
    default registry) written with `default_host`, as a market pins it
    (`host/library/python@sha256:...`); None for any other reference."""
    name = ImageName.parse(reference)
    if name.host is not None or name.digest is None or name.tag is not None:
        return None
    return located(reference, default_host).pinned(name.digest)


def located(reference: str, default_registry: str | None) -> ImageName:
    """`reference` with its registry host: its own, else the default registry's (one-part names
    under `library/`, as docker files them); RegistryError saying what to set when it names
    none and no default registry is set. A host that is the default registry's parent domain
    (the canonical name docker writes for its default, whose index answers on a subdomain) is
    read as the default registry."""
    name = ImageName.parse(reference)
    if name.host is not None:
        host = default_host(default_registry) if default_registry else None
        if host is None or not host.endswith(f".{name.host}"):
            return name
        return ImageName(host, name.repository, name.tag, name.digest)
    host = default_host(default_registry)
    if host is None:
        raise RegistryError(
            f"{reference} names no registry host and no default registry is set: set "
            f"default_registry (a registry's host[:port], or `{ENGINE}` for the local docker "
            "engine's) or write the registry's host in the image"
        )
    repository = name.repository if "/" in name.repository else OFFICIAL + name.repository
    return ImageName(host, repository, name.tag, name.digest)


def names_registry(reference: str) -> bool:
    """Whether `reference` names a registry host (only those are resolved)."""
    return ImageName.parse(reference).host is not None


def resolve(
    reference: str,
    timeout_s: float = TIMEOUT_S,
    default_registry: str | None = None,
    credentials: Credentials | None = None,
) -> str:
    """`host/repo@sha256:...` for `reference` (a tag, or a digest the registry must hold), as
    the registry answers now, the digest being the sha256 of the manifest's bytes; RegistryError
    naming the reference and why not otherwise (NotInRegistry, NeedsCredentials)."""
    name = located(reference, default_registry)
    url = name.manifest_url()
    what = f"digest {name.digest}" if name.digest else f"tag {name.tag or 'latest'}"
    headers = {"Accept": ", ".join(MANIFEST_TYPES)}
    scope = f"repository:{name.repository}:pull"
    try:
        with httpx.Client(timeout=timeout_s, follow_redirects=False) as http:
            answer = registry_auth.request(http, "GET", url, headers, scope, credentials)
            try:
                digest = _body_digest(answer)
            finally:
                answer.close()
    except httpx.HTTPError as exc:
        raise RegistryError(f"registry {name.host} is unreachable ({url}): {exc}") from exc
    except CredentialsRefused as exc:
        raise NeedsCredentials(f"registry {name.host}: {exc}") from exc
    except RegistryAuthError as exc:
        raise RegistryError(f"registry {name.host}: {exc}") from exc
    if answer.status_code == 404:
        raise NotInRegistry(f"registry {name.host} has no {what} of {name.repository}")
    if answer.status_code in (401, 403):
        raise NeedsCredentials(
            f"registry {name.host} refused user {credentials.username} for {name.repository}"
            if credentials
            else f"registry {name.host} asks for credentials to read {name.repository} (a "
            "private image): give the renter's registry credentials"
        )
    if answer.status_code != 200 or not digest:
        raise RegistryError(
            f"{name.host} did not answer as a registry for {reference} (HTTP "
            f"{answer.status_code} to {url}, no manifest)"
        )
    said = answer.headers.get("Docker-Content-Digest")
    if said and said != digest:
        raise RegistryError(f"registry {name.host} names {said} for a manifest whose bytes are "
                            f"{digest}: it contradicts itself, refused")  # fmt: skip
    if name.digest and digest != name.digest:
        raise RegistryError(
            f"registry {name.host} serves {digest} for {reference}: not the image named"
        )
    return name.pinned(digest)


def _body_digest(answer: httpx.Response) -> str | None:
    """The sha256 of the manifest's bytes (what a digest names), or None when what was served
    is no manifest."""
    kind = answer.headers.get("Content-Type", "").split(";")[0].strip()
    if answer.status_code != 200 or kind not in MANIFEST_TYPES:
        return None
    body = registry_auth.bounded(answer, MAX_MANIFEST_BYTES)
    return None if body is None else "sha256:" + hashlib.sha256(body).hexdigest()


def pinned(
    reference: str, timeout_s: float = TIMEOUT_S, default_registry: str | None = None
) -> str:
    """`reference` pinned to its registry's digest now. A bare name without a default registry
    stays as written, and so does one the default registry does not hold (an image a provider
    has on its machine, as docker runs a local image before it pulls one)."""
    if names_registry(reference):
        return resolve(reference, timeout_s, default_registry)
    host = default_host(default_registry)
    if host is None:
        return reference
    try:
        return resolve(reference, timeout_s, host)
    except NotInRegistry:
        return reference
