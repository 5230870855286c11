"""A job's image pinned at quote time: a spec naming a registry's tag (`host/repo:tag`) is
quoted as the tag's digest now (`host/repo@sha256:...`), so the spec the job id digests, the
renter locks and the provider runs names exactly one image; a spec naming a digest has it
checked against the registry. A reference without a registry host (`unchained/python-numpy:
latest`) names the provider's own image and is quoted as written (`offchain/protocol/registry`).
"""

from __future__ import annotations

from offchain.market import schemas
from offchain.market.errors import Conflict
from offchain.market.settings import MarketSettings
from offchain.protocol.job.registry import ImageName, RegistryError, is_loopback, resolve


def pinned(settings: MarketSettings, request: schemas.JobRequest) -> schemas.JobRequest:
    """`request` with its spec's image pinned to its registry's digest; Conflict naming the
    image and why when the registry cannot say (nothing is quoted, so nothing is locked)."""
    image = request.spec.image
    name = ImageName.parse(image)
    host = name.host
    if host is None:
        return request
    if is_loopback(host) and not settings.local_registries:
        raise Conflict(
            f"image {image}: this market reads no registry on its own machine ({host})",
            "spec.image",
        )
    try:
        digest = resolve(image, settings.registry_timeout_ms / 1000)
    except RegistryError as exc:
        raise Conflict(f"image {image} cannot be pinned to a digest: {exc}", "spec.image") from exc
    if name.digest:  # checked: the registry holds it; the spec stays as the renter wrote it
        return request
    spec = request.spec.model_copy(update={"image": digest})
    return request.model_copy(update={"spec": spec})
