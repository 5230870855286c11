"""The llm part of tests/consumer/test_endpoint_deploy.py (its daemon, gateway and renter, one
set-up for both): `kind: llm` endpoints deployed with `unchained endpoint deploy`, called with
the official `openai` client through `unchained endpoint proxy`, billed per token; a server
over-reporting its tokens refused; a deployment that never becomes healthy stopped, owing
nothing; what the provider claims on chain equal, to the lovelace, to the renter's count."""

from __future__ import annotations

import re
import signal
import subprocess
from pathlib import Path
from typing import Any

import docker
import openai
import yaml

import samples.llm_tokens as tokenizer
from consumer.sdk.channel_store import ChannelStore
from samples import images as sample_images
from tests.consumer.cli import UNCHAINED, run, run_json

INPUT, OUTPUT = 10_000, 100_000  # lovelace a token: a claim of a few requests is ADA
MODEL = "unchained-gpt"
MAX_TOKENS = 400  # the cancelled stream's: far more than it streams
SEEN = 5  # completion tokens the client reads before it closes the stream


def llm_spec(image: str, **extra: Any) -> dict[str, Any]:
    return {"kind": "llm", "image": image, "port": sample_images.SAMPLE_SERVICE_PORT,
            "price_per_input_token": INPUT, "price_per_output_token": OUTPUT,
            "resources": {"cpu_cores": 1, "memory_mib": 512}, **extra}  # fmt: skip


def deploy(env: dict[str, str], tmp_path: Path, name: str, spec: dict[str, Any],
           deposit: str) -> tuple[int, dict[str, Any]]:  # fmt: skip
    (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(spec))
    return run_json(env, "endpoint", "deploy", f"{name}.yaml", "--deposit", deposit, "--name",
                    name, "--wait", "60", cwd=tmp_path)  # fmt: skip


class Proxy:
    """`unchained endpoint proxy NAME` as the renter runs it: its base URL once it serves."""

    def __init__(self, env: dict[str, str], name: str, cwd: Path) -> None:
        self.process = subprocess.Popen([*UNCHAINED, "endpoint", "proxy", name], env=env,
                                        cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        text=True)  # fmt: skip
        assert self.process.stdout is not None
        first = self.process.stdout.readline()
        found = re.search(r"OpenAI base URL (\S+)", first)
        assert found, (first, self.process.stderr.read() if self.process.stderr else "")
        self.client = openai.OpenAI(base_url=found[1], api_key="any", max_retries=0)

    def stop(self) -> tuple[int, str]:
        """Ctrl-C: it pays what it counted; its exit code and output."""
        self.process.send_signal(signal.SIGINT)
        out, err = self.process.communicate(timeout=60)
        return self.process.returncode, out + err


def cost(usage: Any) -> int:
    return usage.prompt_tokens * INPUT + usage.completion_tokens * OUTPUT


def llm_endpoints_on_devnet(env: dict[str, str], tmp_path: Path, daemon: Any) -> tuple[str, int]:
    """The llm flow; the channel that paid and what the provider holds an IOU for on it."""
    image = sample_images.llm_service_image(docker.from_env())
    code, deployed = deploy(env, tmp_path, "chat", llm_spec(image), "60")
    assert code == 0 and deployed["state"] == "running", (deployed, daemon.log())
    channel = deployed["channel"]
    proxy = Proxy(env, "chat", tmp_path)
    try:
        client = proxy.client
        assert [model.id for model in client.models.list()] == [MODEL]
        messages: Any = [{"role": "user", "content": "Tell me a story."}]
        answer = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=12)
        assert answer.usage is not None and answer.choices[0].message.content
        prompt = tokenizer.prompt_tokens("/v1/chat/completions", {"messages": messages})
        assert answer.usage.prompt_tokens == prompt
        billed = cost(answer.usage)
        text, usage = "", None
        for chunk in client.chat.completions.create(model=MODEL, messages=messages,
                                                    max_tokens=20, stream=True):  # fmt: skip
            text += chunk.choices[0].delta.content or "" if chunk.choices else ""
            usage = chunk.usage or usage  # every chunk's, as the gateway asked the server
        assert usage is not None and usage.completion_tokens == len(text.encode())
        billed += cost(usage)
        embedded = client.embeddings.create(model=MODEL, input="hello")
        assert len(embedded.data[0].embedding) > 0
        billed += len(tokenizer.encode("hello")) * INPUT

        seen = 0
        stream = client.completions.create(model=MODEL, prompt="Once", max_tokens=MAX_TOKENS,
                                           stream=True)  # fmt: skip
        for part in stream:
            seen += len(part.choices[0].text.encode()) if part.choices else 0
            if seen >= SEEN:
                break
        stream.close()
    finally:
        code, said = proxy.stop()
    assert code == 0, said
    paid = ChannelStore(Path(env["UNCHAINED_CONSUMER_STATE_DIR"])).signed(channel)
    cancelled = paid - billed  # the cancelled stream, by the renter's count and the provider's
    prompt_cost = tokenizer.prompt_tokens("/v1/completions", {"prompt": "Once"}) * INPUT
    assert prompt_cost + SEEN * OUTPUT <= cancelled < prompt_cost + MAX_TOKENS * OUTPUT, said
    code, listed = run_json(env, "endpoint", "list", cwd=tmp_path)
    shown = {d["name"]: d for d in listed}
    assert shown["chat"]["served"] == paid == shown["chat"]["due"]  # to the lovelace
    assert run(env, "endpoint", "stop", "chat", cwd=tmp_path).returncode == 0

    code, deployed = deploy(env, tmp_path, "liar", llm_spec(
        image, env={"UNCHAINED_SAMPLE_OVERCOUNT": "3"}), "8")  # fmt: skip
    assert code == 0 and deployed["channel"] == channel, deployed
    proxy = Proxy(env, "liar", tmp_path)
    try:
        first = proxy.client.completions.create(model=MODEL, prompt="Hi", max_tokens=4)
        assert first.usage is not None  # the server says 3 tokens more than it sent
        try:
            proxy.client.completions.create(model=MODEL, prompt="Hi", max_tokens=4)
            raise AssertionError("a count above the renter's was paid")
        except openai.APIStatusError as refused:
            assert refused.status_code == 402 and "more than the" in refused.message
    finally:
        code, said = proxy.stop()
    assert code != 0 and "402" in said and "more than the" in said, said  # settle refused too
    stopped = run(env, "endpoint", "stop", "liar", cwd=tmp_path)
    assert stopped.returncode != 0 and "counted here: not signed" in stopped.stderr, stopped

    wallet = ChannelStore(Path(env["UNCHAINED_CONSUMER_STATE_DIR"])).signed(channel)
    never = llm_spec(image, health_path="/never", start_timeout_s=3)
    code, failed = deploy(env, tmp_path, "never", never, "8")
    assert code != 0 and failed["state"] == "failed", failed
    assert "did not answer 2xx within 3 s" in failed["reason"], failed
    assert (failed["started_ms"], failed["served"]) == (0, 0)  # billing never started
    assert ChannelStore(Path(env["UNCHAINED_CONSUMER_STATE_DIR"])).signed(channel) == wallet
    return channel, paid
