"""The sample services' images, for the tests, benchmarks and demo (never a provider's own
path): built on the provider's python image (`provider.images.recipes`).

- sample-service: the python image running `samples/sample_service.py` (an HTTP server with
  /health and /predict on port 8000);
- onnx-service: the python image plus onnxruntime (its wheel unpacked into site-packages, no
  network inside the build), `samples/onnx_model.py`'s network and `samples/onnx_service.py`
  serving it on the same port (built once per machine: seconds over the python image, once
  pip has fetched the 28 MB wheel);
- llm-service: the PyTorch image (`provider.images.torch`) with `samples/llm_model.py`'s
  transformer served by `samples/llm_service.py` (OpenAI's routes) on the same port.
"""

from __future__ import annotations

import io
import platform
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

import docker

from provider.images.recipes import (
    PYTHON_CHANGES,
    add_folders,
    cached,
    commit,
    content_tag,
    python_image,
    python_with,
)

HERE = Path(__file__).parent
SAMPLE_SERVICE_REPOSITORY = "unchained/sample-service"
SAMPLE_SERVICE_SCRIPT = HERE / "sample_service.py"
SAMPLE_SERVICE_PORT = 8000
ONNX_SERVICE_REPOSITORY = "unchained/onnx-service"
ONNXRUNTIME_REPOSITORY = "unchained/onnxruntime"
ONNXRUNTIME = "onnxruntime==1.32.0"  # its wheels need no other package to serve a model
ONNXRUNTIME_WHEEL = ("--only-binary=:all:", "--no-deps", "--python-version", "3.11",
                     "--platform", f"manylinux_2_28_{platform.machine()}")  # fmt: skip
ONNXRUNTIME_ENV = "ENV ORT_DISABLE_TELEMETRY=1"  # no device id written, nothing uploaded
SITE_PACKAGES = "usr/local/lib/python3.11/dist-packages"  # bookworm's python3 looks here
ONNX_SERVICE_SCRIPT = HERE / "onnx_service.py"
LLM_SERVICE_REPOSITORY = "unchained/llm-service"
LLM_EXAMPLE = f"{LLM_SERVICE_REPOSITORY}:latest"  # the image `endpoint init --example llm` names
LLM_FILES = [HERE / name for name in ("sample_service.py", "llm_tokens.py", "llm_model.py",
                                      "llm_service.py")]  # fmt: skip
ONNX_IN_IMAGE = "/opt/unchained"  # PYTHONPATH: the scripts are samples.* there, as here


def sample_service_image(client: docker.DockerClient) -> str:
    """The python image serving `samples/sample_service.py` on SAMPLE_SERVICE_PORT."""
    script = f"/opt/unchained/{SAMPLE_SERVICE_SCRIPT.name}"
    changes = [*PYTHON_CHANGES[:-1], f"EXPOSE {SAMPLE_SERVICE_PORT}",
               f'CMD ["python3", "{script}", "{SAMPLE_SERVICE_PORT}"]']  # fmt: skip
    return python_with(
        client, SAMPLE_SERVICE_REPOSITORY, "/opt/unchained", [SAMPLE_SERVICE_SCRIPT], changes
    )


def onnx_service_image(client: docker.DockerClient) -> str:
    """The onnxruntime image serving `onnx_model.mlp()` with `samples/onnx_service.py` on
    SAMPLE_SERVICE_PORT."""
    from samples.onnx_model import model_bytes  # onnx: imported only by who builds this

    folder = f"{ONNX_IN_IMAGE}/samples"
    changes = [*PYTHON_CHANGES[:-1], f"ENV PYTHONPATH={ONNX_IN_IMAGE}",
               f"EXPOSE {SAMPLE_SERVICE_PORT}",
               f'CMD ["python3", "-m", "samples.onnx_service", "{folder}/model.onnx", '
               f'"{SAMPLE_SERVICE_PORT}"]']  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="unchained-onnx-") as scratch:
        model = Path(scratch) / "model.onnx"
        model.write_bytes(model_bytes())
        files = [SAMPLE_SERVICE_SCRIPT, ONNX_SERVICE_SCRIPT, model]
        return python_with(client, ONNX_SERVICE_REPOSITORY, folder, files, changes,
                            base=_onnxruntime_image(client))  # fmt: skip


def _onnxruntime_image(client: docker.DockerClient) -> str:
    """The python image with ONNXRUNTIME's wheel (for the image's Python, fetched here by pip)
    unpacked into its site-packages; tagged by the pinned release, whose files never change."""
    base = python_image(client)
    changes = [*PYTHON_CHANGES, ONNXRUNTIME_ENV]
    recipe = " ".join((ONNXRUNTIME, *ONNXRUNTIME_WHEEL, *changes))
    tag = content_tag(base.encode(), recipe.encode())

    def build() -> None:
        with tempfile.TemporaryDirectory(prefix="unchained-wheel-") as scratch:
            done = subprocess.run(
                [sys.executable, "-m", "pip", "download", "-q", "-d", scratch,
                 *ONNXRUNTIME_WHEEL, ONNXRUNTIME],
                capture_output=True, text=True,
            )  # fmt: skip
            if done.returncode:
                raise RuntimeError(f"pip download failed:\n{(done.stdout + done.stderr)[-2000:]}")
            (wheel,) = Path(scratch).glob("*.whl")
            site = Path(scratch) / "site"
            with zipfile.ZipFile(wheel) as unpacked:
                unpacked.extractall(site)
            archive = io.BytesIO()
            with tarfile.open(fileobj=archive, mode="w") as tar:
                add_folders(tar, SITE_PACKAGES)
                for entry in sorted(site.iterdir()):
                    tar.add(str(entry), arcname=f"{SITE_PACKAGES}/{entry.name}")
            commit(client, base, archive.getvalue(), ONNXRUNTIME_REPOSITORY, tag, changes)

    return cached(client, f"{ONNXRUNTIME_REPOSITORY}:{tag}", build)


def llm_service_image(client: docker.DockerClient) -> str:
    """The PyTorch image serving `samples/llm_service.py` on SAMPLE_SERVICE_PORT; also tagged
    LLM_EXAMPLE."""
    from provider.images.torch import torch_image

    command = f'CMD ["python3", "-m", "samples.llm_service", "{SAMPLE_SERVICE_PORT}"]'
    changes = [*PYTHON_CHANGES[:-1], f"ENV PYTHONPATH={ONNX_IN_IMAGE}",
               f"EXPOSE {SAMPLE_SERVICE_PORT}", command]  # fmt: skip
    reference = python_with(client, LLM_SERVICE_REPOSITORY, f"{ONNX_IN_IMAGE}/samples",
                            LLM_FILES, changes, base=torch_image(client))  # fmt: skip
    client.images.get(reference).tag(*LLM_EXAMPLE.split(":"))
    return reference
