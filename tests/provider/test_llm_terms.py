"""`kind: llm` on the provider's side without a container: the deploy terms (token prices at
least the provider's, none without its `token_prices`), the routing's same rule, and the
gateway's meter of an answer's usage as it passes (an SSE event cut across chunks counts once
whole; the last event with usage counts; a whole answer's at its end; stream options added)."""

from __future__ import annotations

import json

import pytest

from consumer.sdk.deploy_route import refusal
from offchain.protocol.api.control import ControlRefused
from offchain.protocol.job.jobspec import Bundle, parse_spec
from provider.gateway.control import DeployTerms
from provider.gateway.tokens import STREAM_OPTIONS, UsageMeter, with_usage

SPEC = parse_spec({"kind": "llm", "image": "unchained/llm@sha256:" + "a" * 64, "port": 8000,
                   "price_per_input_token": 2, "price_per_output_token": 8})  # fmt: skip
OFFER = {"gateway_url": "http://gw:8700", "cpu_cores": 4, "memory_mib": 4096, "gpu_count": 0,
         "vram_mib": 0, "price_per_unit": 1}  # fmt: skip


@pytest.mark.parametrize(
    ("floors", "refused"),
    [(None, "sells no llm endpoints"), ((3, 8), "price_per_input_token: 2 lovelace is below"),
     ((2, 9), "price_per_output_token: 8 lovelace is below"), ((2, 8), None)],
)  # fmt: skip
def test_token_prices_at_least_the_providers(floors, refused):
    terms = DeployTerms(Bundle(cpu_cores=4, memory_mib=4096), 1, None, floors)
    routed = refusal({**OFFER, **({} if floors is None else {"token_prices": list(floors)})},
                     SPEC)  # fmt: skip
    if refused is None:
        terms.check(SPEC)
        assert routed is None
    else:
        with pytest.raises(ControlRefused, match=refused):
            terms.check(SPEC)
        assert routed == f"token prices {None if floors is None else list(floors)}"


def event(completion: int) -> bytes:
    chunk = {"choices": [{"text": "x"}], "usage": {"prompt_tokens": 5,
                                                   "completion_tokens": completion}}  # fmt: skip
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


def test_a_stream_is_metered_by_its_whole_events():
    meter = UsageMeter(streaming=True)
    wire = event(1) + event(2) + event(3)
    cut = len(event(1)) + len(event(2)) + 10  # the third event's first bytes
    meter.feed(wire[:cut])
    assert meter.usage == (5, 2)  # the third is not whole: not counted
    meter.feed(wire[cut:] + b"data: [DONE]\n\n")
    assert meter.usage == (5, 3)


def test_a_whole_answer_is_metered_at_its_end():
    meter = UsageMeter(streaming=False)
    body = json.dumps({"usage": {"prompt_tokens": 7, "completion_tokens": 4}}).encode()
    meter.feed(body[:9])
    meter.feed(body[9:])
    assert meter.usage == (0, 0)
    meter.finish()
    assert meter.usage == (7, 4)


def test_streaming_requests_ask_for_usage_in_every_chunk():
    asked = with_usage(json.dumps({"stream": True, "stream_options": {"x": 1}}).encode())
    assert asked is not None and json.loads(asked)["stream_options"] == {"x": 1, **STREAM_OPTIONS}
    plain = json.dumps({"stream": False}).encode()
    assert with_usage(plain) == plain and with_usage(b"not json, stream") == b"not json, stream"
