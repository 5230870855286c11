"""The official `openai` client, unchanged, against an llm endpoint (`kind: llm`) through the
provider's real gateway (uvicorn, its channel and endpoint books on disk) and the renter's
local proxy (`consumer.sdk.llm_proxy`), the upstream the real sample LLM server in its docker
image (`samples.images.llm_service_image`: a PyTorch transformer). No chain: the channel is
opened in the book directly, as tests/consumer/test_endpoint_gateway.py does. Each request's
tokens are billed from the server's usage, counted by the renter with the model's tokenizer,
and the books balance to the lovelace: the provider's `served`, the renter's count and its
last IOU; a cancelled stream is billed for what was streamed, a server over-reporting its
tokens is refused unsigned."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import httpx
import openai
import pytest

import samples.llm_tokens as tokenizer
from consumer.sdk.channel_store import ChannelStore
from consumer.sdk.iou_signer import IouSigner
from consumer.sdk.keys import ConsumerKey
from consumer.sdk.llm_meter import LlmPrices
from consumer.sdk.llm_proxy import LlmProxy
from offchain.protocol.ledger.amounts import ada
from provider.gateway.app import gateway_app
from provider.rentals.book import RentalBook
from samples.images import SAMPLE_SERVICE_PORT, llm_service_image
from tests.consumer.test_channels import record
from tests.provider.test_gateway_support import (
    CHANNEL,
    NETWORK,
    RENTER,
    SCRIPT,
    book_with_channels,
    running,
    serving,
    stored,
)

PRICES = LlmPrices(input=3, output=11)
SPEC = {"kind": "llm", "price_per_input_token": PRICES.input,
        "price_per_output_token": PRICES.output}  # fmt: skip
MODEL = "unchained-gpt"
HEALTHY_WITHIN_S = 120


def llm_container(client: docker.DockerClient, env: dict[str, str]) -> tuple[str, str]:
    """The sample LLM server's container (its id) and its URL once it answers /health."""
    container = client.containers.run(
        llm_service_image(client), detach=True, environment=env,
        ports={f"{SAMPLE_SERVICE_PORT}/tcp": ("127.0.0.1", None)},
    )  # fmt: skip
    deadline = time.monotonic() + HEALTHY_WITHIN_S
    while True:
        container.reload()
        port = container.ports.get(f"{SAMPLE_SERVICE_PORT}/tcp")
        if port:
            url = f"http://127.0.0.1:{port[0]['HostPort']}"
            try:
                if httpx.get(f"{url}/health").status_code == 200:
                    return container.id, url
            except httpx.HTTPError:
                pass
        if time.monotonic() > deadline or container.status == "exited":
            raise RuntimeError(f"the LLM server never answered: {container.logs()[-2000:]!r}")
        time.sleep(0.2)


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, str]]:
    """An honest server and one reporting 3 completion tokens more than it sends."""
    client = docker.from_env()
    made: list[str] = []
    try:
        urls = {}
        for name, env in (("chat", {}), ("liar", {"UNCHAINED_SAMPLE_OVERCOUNT": "3"})):
            ident, urls[name] = llm_container(client, env)
            made.append(ident)
        yield urls
    finally:
        for ident in made:
            client.containers.get(ident).remove(force=True)


@pytest.fixture
def gateway(tmp_path: Path, servers: dict[str, str]) -> Iterator[tuple[str, RentalBook]]:
    book = book_with_channels(tmp_path / "channels.sqlite")
    endpoints = RentalBook(tmp_path / "endpoints.sqlite")
    for name, url in servers.items():
        endpoints.add(dataclasses.replace(running(name, url, 0), spec_json=json.dumps(SPEC)))
    with serving(gateway_app(book, endpoints)) as url:
        yield url, endpoints
    book.close()
    endpoints.close()


@pytest.fixture
def store(tmp_path: Path) -> ChannelStore:
    made = ChannelStore(tmp_path / "renter")
    made.save(record(ConsumerKey(RENTER), CHANNEL.hex()))
    return made


def proxy_to(gateway: str, name: str, store: ChannelStore) -> LlmProxy:
    signer = IouSigner(ConsumerKey(RENTER), NETWORK, SCRIPT, store.get(CHANNEL.hex()), store)
    return LlmProxy(gateway, name, signer, PRICES, tokenizer)


def served(endpoints: RentalBook, name: str) -> int:
    deployment = endpoints.get(stored(name))
    assert deployment is not None
    return deployment.served


def test_the_openai_client_billed_per_token(gateway, store):
    url, endpoints = gateway
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi!"}]
    expected_prompt = tokenizer.prompt_tokens("/v1/chat/completions", {"messages": messages})
    with proxy_to(url, "chat", store) as proxy:
        client = openai.OpenAI(base_url=proxy.url, api_key="unchained")
        assert [model.id for model in client.models.list()] == [MODEL]

        answer = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=12)
        text = answer.choices[0].message.content or ""
        assert answer.usage is not None
        assert answer.usage.prompt_tokens == expected_prompt
        assert answer.usage.completion_tokens == len(text.encode()) > 0
        cost = PRICES.input * expected_prompt + PRICES.output * len(text.encode())
        assert proxy.counted() == cost
        assert served(endpoints, "chat") == 0  # owed at the gateway until the next IOU

        streamed = ""
        for chunk in client.chat.completions.create(
            model=MODEL, messages=messages, max_tokens=20, stream=True, seed=7
        ):
            if chunk.choices:
                streamed += chunk.choices[0].delta.content or ""
        paid = cost  # by the stream's IOU
        cost += PRICES.input * expected_prompt + PRICES.output * len(streamed.encode())
        assert proxy.counted() == cost and served(endpoints, "chat") == paid

        vector = client.embeddings.create(model=MODEL, input="hello").data[0].embedding
        assert abs(sum(v * v for v in vector) - 1.0) < 1e-3  # unit length
        paid = cost
        cost += PRICES.input * len(tokenizer.encode("hello"))
        assert proxy.counted() == cost and served(endpoints, "chat") == paid

        assert proxy.settle() == cost == served(endpoints, "chat")  # the last answer paid
    assert store.signed(CHANNEL.hex()) == cost  # the renter's last IOU: to the lovelace


def test_a_cancelled_stream_is_billed_for_what_streamed(gateway, store):
    url, endpoints = gateway
    prompt = {"prompt": "Once upon a time"}
    with proxy_to(url, "chat", store) as proxy:
        client = openai.OpenAI(base_url=proxy.url, api_key="unchained")
        seen = 0
        stream = client.completions.create(model=MODEL, max_tokens=400, temperature=0.0,
                                           stream=True, **prompt)  # fmt: skip
        for chunk in stream:
            seen += len(chunk.choices[0].text.encode()) if chunk.choices else 0
            if seen >= 5:
                break
        stream.close()
        counted = proxy.counted()
        prompt_cost = PRICES.input * tokenizer.prompt_tokens("/v1/completions", prompt)
        # what reached the renter's machine: more than the client read, far less than asked
        assert prompt_cost + PRICES.output * seen <= counted < prompt_cost + PRICES.output * 400
        assert proxy.settle() == counted == served(endpoints, "chat")  # the provider's count
    assert store.signed(CHANNEL.hex()) == counted


def test_a_server_claiming_more_tokens_is_refused(gateway, store):
    url, endpoints = gateway
    with proxy_to(url, "liar", store) as proxy:
        client = openai.OpenAI(base_url=proxy.url, api_key="unchained", max_retries=0)
        first = client.completions.create(model=MODEL, prompt="Hi", max_tokens=5)
        assert first.usage is not None
        counted = proxy.counted()
        with pytest.raises(openai.APIStatusError, match="more than the") as refused:
            client.completions.create(model=MODEL, prompt="Hi", max_tokens=5)
        assert refused.value.status_code == 402 and proxy.disputes
        asked = counted + 3 * PRICES.output  # what the gateway believes, from the server's usage
        assert f"asks for {ada(asked)} in all" in proxy.disputes[0]
    assert store.signed(CHANNEL.hex()) <= counted  # nothing signed above the renter's count
    assert served(endpoints, "liar") == 0  # the disputed answer never reached the book
