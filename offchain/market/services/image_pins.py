"""A job's image pinned at quote time: a spec naming a registry's tag (`host/repo:tag`, or a bare
name read in the market's `default_registry` as docker reads it) is quoted as the tag's digest
now (`host/repo@sha256:...`), so the spec the job id digests, the renter locks and the provider
runs names exactly one image; a spec naming a digest has it checked against the registry.

Left as written: a bare name when no default registry is set, or one the default registry does
not hold (an image the provider has on its machine), and a private image the renter pinned
itself (`host/repo@sha256:...` the registry shows only to an account): the market holds no
renter's account and needs none, the digest already names the image, and docker checks the
manifest's bytes against it as the provider pulls. A private tag is refused: only its renter,
who has the account, can pin it (`offchain/protocol/job/registry`)."""

from __future__ import annotations

from offchain.market import schemas
from offchain.market.errors import Conflict
from offchain.market.settings import MarketSettings
from offchain.protocol.job.registry import (
    ImageName,
    NeedsCredentials,
    NotInRegistry,
    RegistryError,
    default_host,
    is_loopback,
    located,
    resolve,
)


def pinned(settings: MarketSettings, request: schemas.JobRequest) -> schemas.JobRequest:
    """`request` with its spec's image pinned to its registry's digest; Conflict naming the
    image and why when the registry cannot say (nothing is quoted, so nothing is locked)."""
    image = request.spec.image
    name = ImageName.parse(image)
    default = default_host(settings.default_registry)
    if name.host is None and default is None:
        return request
    host = located(image, default).host
    assert host is not None  # located names one when there is a default
    if is_loopback(host) and not settings.local_registries:
        raise Conflict(
            f"image {image}: this market reads no registry on its own machine ({host})",
            "spec.image",
        )
    try:
        digest = resolve(image, settings.registry_timeout_ms / 1000, default)
    except NotInRegistry as exc:
        if name.host is None:  # a provider's own image, as docker runs a local one
            return request
        raise Conflict(f"image {image} cannot be pinned to a digest: {exc}", "spec.image") from exc
    except NeedsCredentials as exc:
        if name.digest:  # pinned by its renter, who has the account
            return request
        raise Conflict(
            f"image {image} is private ({exc}): pin it to its digest with your registry "
            "account (`unchained job submit --registry-auth`); the market holds none",
            "spec.image",
        ) from exc
    except RegistryError as exc:
        raise Conflict(f"image {image} cannot be pinned to a digest: {exc}", "spec.image") from exc
    if name.digest:  # checked: the registry holds it; the spec stays as the renter wrote it
        return request
    spec = request.spec.model_copy(update={"image": digest})
    return request.model_copy(update={"spec": spec})
