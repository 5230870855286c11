"""The PyTorch image: the python image (`recipes.python_image`) plus Debian's python3-torch
(1.13 on bookworm, CPU), added by `debian_layer` without network inside the build (apt here
fetches 231 MB once; dpkg takes a minute or two), tagged by its recipe and also `TORCH_EXAMPLE`.
The example image adds the PyTorch example job's training script (`torch_job/`) at
TORCH_SCRIPTS_IN_IMAGE and is tagged `TORCH_JOB_EXAMPLE` too, the name the spec `unchained job
init --example pytorch` writes runs in: baked in rather than sent as the job's input, so the
spec stays a few readable lines and the image pins the script's bytes. On a GPU machine a
renter names a CUDA build (`pytorch/pytorch:TAG`) and gives it the same script."""

from __future__ import annotations

from pathlib import Path

import docker

from provider.images import recipes
from provider.images.debian_layer import commit_with_packages

TORCH_REPOSITORY = "unchained/pytorch"
TORCH_EXAMPLE = f"{TORCH_REPOSITORY}:latest"
TORCH_EXAMPLE_REPOSITORY = "unchained/pytorch-example"
TORCH_JOB_EXAMPLE = f"{TORCH_EXAMPLE_REPOSITORY}:latest"
TORCH_SCRIPTS = Path(__file__).parent / "torch_job"
TORCH_SCRIPTS_IN_IMAGE = "/opt/unchained/torch"
TRAIN_SCRIPT = f"{TORCH_SCRIPTS_IN_IMAGE}/train_cnn.py"
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


def torch_example_image(client: docker.DockerClient) -> str:
    """The PyTorch image with the example job's scripts added (seconds once torch_image is
    built); also tagged TORCH_JOB_EXAMPLE."""
    scripts = sorted(TORCH_SCRIPTS.glob("*.py"))
    reference = recipes.python_with(
        client, TORCH_EXAMPLE_REPOSITORY, TORCH_SCRIPTS_IN_IMAGE, scripts, recipes.PYTHON_CHANGES,
        base=torch_image(client),
    )  # fmt: skip
    client.images.get(reference).tag(*TORCH_JOB_EXAMPLE.split(":"))
    return reference
