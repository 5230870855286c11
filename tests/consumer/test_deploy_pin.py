"""A deploy signs the image the registry serves now: a tag is pinned to its digest before the
spec is signed, a digest is checked, and a provider's local image is left as named."""

from __future__ import annotations

import docker
import pytest

from consumer.sdk.deploy_route import pinned_spec
from offchain.protocol.job.jobspec import ServiceSpec
from offchain.protocol.job.registry import RegistryError
from provider.images.recipes import BUSYBOX_REPOSITORY, busybox_image
from tests.registry import LocalRegistry

pytestmark = pytest.mark.docker


def service(image: str) -> ServiceSpec:
    return ServiceSpec(kind="service", image=image, port=8000, price_per_request=1_000)


def test_a_tag_is_pinned_to_the_registry_digest(registry: LocalRegistry) -> None:
    client = docker.from_env()
    local = busybox_image(client)
    by_digest = registry.push(client, local, BUSYBOX_REPOSITORY)
    tag = local.rsplit(":", 1)[1]
    spec = service(f"{registry.host}/{BUSYBOX_REPOSITORY}:{tag}")

    pinned = pinned_spec(spec)

    assert pinned.image == by_digest
    assert pinned.model_dump(exclude={"image"}) == spec.model_dump(exclude={"image"})
    assert pinned_spec(pinned).image == by_digest  # a digest stays, once checked


def test_an_unknown_tag_is_refused_before_anything_is_signed(registry: LocalRegistry) -> None:
    with pytest.raises(RegistryError, match="has no"):
        pinned_spec(service(f"{registry.host}/{BUSYBOX_REPOSITORY}:no-such-tag"))


def test_a_local_image_is_left_as_named() -> None:
    spec = service("unchained/sample-service:latest")
    assert pinned_spec(spec) is spec
