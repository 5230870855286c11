"""The GPU path of llm endpoints: vLLM's OpenAI server (its docker image, named by VLLM_IMAGE
and pulled beforehand: no registry is reachable from the test) serving the sample model's
shape and tokenizer (`samples/llm_hf.py`, weights drawn by `--load-format dummy`), behind the
real gateway, called with the official `openai` client through the renter's proxy
(`consumer.sdk.llm_proxy`), exactly as tests/consumer/test_llm_gateway.py calls the CPU
server: the renter's count of every answer, vLLM's usage and the provider's book equal to the
lovelace, a cancelled stream billed for what it streamed.

Marked `gpu`: it needs an NVIDIA GPU, a docker engine with the NVIDIA runtime and the image;
elsewhere it skips, saying which is missing. `VLLM_IMAGE=vllm/vllm-openai:TAG pytest -m gpu
tests/provider/test_vllm.py`.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from typing import Any

import docker
import httpx
import openai
import pytest

import samples.llm_tokens as tokenizer
from samples.llm_hf import VLLM_SAMPLING, write_model
from tests.consumer.test_llm_gateway import PRICES, gateway, proxy_to, served, store

pytestmark = pytest.mark.gpu
__all__ = ["gateway", "store"]  # fixtures, used by name

MODEL = "unchained-gpt"
PORT = 8000
HEALTHY_WITHIN_S = 600  # vLLM compiles its graphs at start


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """vLLM's server on the GPU, as `test_llm_gateway`'s `servers` (its gateway fixture)."""
    image = os.environ.get("VLLM_IMAGE")
    if not image or shutil.which("nvidia-smi") is None:
        pytest.skip("needs an NVIDIA GPU and VLLM_IMAGE (vLLM's image, pulled)")
    try:
        client = docker.from_env()
        client.images.get(image)
    except docker.errors.DockerException as error:
        pytest.fail(f"VLLM_IMAGE={image} is named but no docker engine holds it: {error}")
    folder = write_model(tmp_path_factory.mktemp("model"))
    container = client.containers.run(
        image, ["--model", "/model", "--load-format", "dummy", "--served-model-name", MODEL,
                "--port", str(PORT), "--max-model-len", "1024"],
        detach=True, volumes={str(folder): {"bind": "/model", "mode": "ro"}},
        ports={f"{PORT}/tcp": ("127.0.0.1", None)},
        device_requests=[docker.types.DeviceRequest(count=1, capabilities=[["gpu"]])],
    )  # fmt: skip
    try:
        yield {"chat": _healthy(container)}
    finally:
        container.remove(force=True)


def _healthy(container: docker.models.containers.Container) -> str:
    deadline = time.monotonic() + HEALTHY_WITHIN_S
    while True:
        container.reload()
        assert container.status != "exited", container.logs()[-3000:]
        port = container.ports.get(f"{PORT}/tcp")
        if port:
            url = f"http://127.0.0.1:{port[0]['HostPort']}"
            try:
                if httpx.get(f"{url}/health").status_code == 200:
                    return url
            except httpx.HTTPError:
                pass
        assert time.monotonic() < deadline, container.logs()[-3000:]
        time.sleep(1)


def test_vllm_through_the_gateway_billed_per_token(gateway, store):
    url, endpoints = gateway
    messages: Any = [{"role": "user", "content": "Hi!"}]
    prompt = tokenizer.prompt_tokens("/v1/chat/completions", {"messages": messages})
    with proxy_to(url, "chat", store) as proxy:
        client = openai.OpenAI(base_url=proxy.url, api_key="any", max_retries=0)
        assert [m.id for m in client.models.list()] == [MODEL]
        answer = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=12,
                                                extra_body=VLLM_SAMPLING)  # fmt: skip
        assert answer.usage is not None and answer.usage.prompt_tokens == prompt
        assert answer.usage.completion_tokens == 12
        cost = prompt * PRICES.input + 12 * PRICES.output
        assert proxy.counted() == cost

        stream = client.completions.create(model=MODEL, prompt="Once", max_tokens=500,
                                           stream=True, extra_body=VLLM_SAMPLING)  # fmt: skip
        seen = 0
        for chunk in stream:
            seen += len(chunk.choices[0].text.encode()) if chunk.choices else 0
            if seen >= 5:
                break
        stream.close()
        billed = proxy.counted() - cost
        once = tokenizer.prompt_tokens("/v1/completions", {"prompt": "Once"}) * PRICES.input
        assert once + 5 * PRICES.output <= billed < once + 500 * PRICES.output
        assert proxy.settle() == served(endpoints, "chat")
