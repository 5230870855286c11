"""The PyTorch image: the python image (`recipes.python_image`) plus Debian's python3-torch
(1.13 on bookworm, CPU), added by `debian_layer` without network inside the build (apt here
fetches 231 MB once; dpkg takes a minute or two). Tagged by its recipe, and also `TORCH_EXAMPLE`,
the name the PyTorch example job runs in. On a GPU machine a renter names a CUDA build
(`pytorch/pytorch:TAG`) instead; the job's code is the same."""

from __future__ import annotations

import docker

from provider.images import recipes
from provider.images.debian_layer import commit_with_packages

TORCH_REPOSITORY = "unchained/pytorch"
TORCH_EXAMPLE = f"{TORCH_REPOSITORY}:latest"
TORCH_PACKAGES = ("python3-torch",)
TRIM = f"rm -rf {' '.join('/' + path for path in recipes.TRIMMED)}\n"


def torch_image(client: docker.DockerClient) -> str:
    """The python image with python3-torch, built here once; also tagged TORCH_EXAMPLE."""
    base = recipes.python_image(client)
    recipe = [base, *TORCH_PACKAGES, TRIM, *recipes.PYTHON_CHANGES]
    reference = f"{TORCH_REPOSITORY}:{recipes.content_tag(*(part.encode() for part in recipe))}"

    def build() -> None:
        commit_with_packages(client, base, TORCH_PACKAGES, reference, recipes.PYTHON_CHANGES, TRIM)

    recipes.cached(client, reference, build)
    client.images.get(reference).tag(*TORCH_EXAMPLE.split(":"))
    return reference
