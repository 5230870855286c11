"""Property: no request makes the market answer 5xx. Hypothesis draws the API's path and query
values (ids, cursors, numbers: huge, 5,000 digits, non-ASCII digits, NUL, invalid UTF-8) and the
JSON fields of every signed and unsigned route's body (each valid body with one field replaced by
any JSON value: integers past 2**63, lone surrogates, NUL, floats, lists, objects), signed by a
provider that owns a real quoted job and a consumer who requested it. The market runs its
real app on the session's devnet over a real SQLite database."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from offchain.market.app import create_app
from offchain.market.settings import MarketSettings
from offchain.protocol.api.rental_report import REPORT_PATH
from offchain.protocol.api.signed_request import BadPayload
from offchain.protocol.tx import deployment_file
from tests.market.client import Party
from tests.market.conftest import IDENTITY
from tests.market.test_deployment_reports import row
from tests.market.test_lifecycle import job_request, offer_terms

EXAMPLES = 500
EDGES = ["", "0", "-1", "²", "٣", "9" * 5000, str(10**30), str(2**63), "1.ab", "\x00",
         "%ED%A0%80", "a" * 300]  # fmt: skip
WORDS = st.text(st.characters(exclude_categories=["Cs"]), max_size=40)
PARAM = st.one_of(st.sampled_from(EDGES), WORDS, st.integers(-(10**40), 10**40).map(str))
JSON_VALUE = st.recursive(
    st.one_of(
        st.none(), st.booleans(), st.floats(), st.text(max_size=40),
        st.integers(-(10**40), 10**40), st.sampled_from(["\ud800", "a\x00b", "²", 10**30, 2**63]),
    ),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                 max_size=3),
    max_leaves=6,
)  # fmt: skip


@pytest.fixture
def market(tmp_path, devnet, market_deployment) -> Iterator[dict[str, Any]]:
    """The market on SQLite with a provider's offer and a consumer's quoted job."""
    deployment_file.save(market_deployment, tmp_path / "deployment.json")
    made = MarketSettings(
        data_dir=tmp_path / "market", ogmios_url=devnet.url, identity=IDENTITY,
        deployment=tmp_path / "deployment.json", body_limit_bytes=64 * 1024,
        result_limit_bytes=1 << 16, long_poll_max_s=0,
    )  # fmt: skip
    with TestClient(create_app(made), raise_server_exceptions=False) as client:
        provider, consumer = (Party.new(None, IDENTITY) for _ in range(2))  # type: ignore[arg-type]
        parties = {"provider": provider, "consumer": consumer}
        sent = send(client, parties, "POST", "/offers", offer_terms(provider), "provider")
        assert sent.status_code == 201, sent.text
        sent = send(client, parties, "POST", "/jobs", job_request(consumer), "consumer")
        assert sent.status_code == 201, sent.text
        yield {"client": client, "parties": parties, "job": sent.json()["job_id"]}


def send(
    client: TestClient, parties: dict[str, Party], method: str, path: str, body: Any,
    signer: str | None,
) -> Any:  # fmt: skip
    """`body` as JSON (raw bytes as they are), signed by `signer` when its path can be signed
    (a signed path is printable ASCII of at most 4,095 characters; else it goes unsigned)."""
    if isinstance(body, bytes):
        content = body
    else:
        content = b"" if body is None else json.dumps(body).encode()
    headers = {"content-type": "application/json"} if body is not None else {}
    if signer is not None:
        with contextlib.suppress(BadPayload):
            headers |= parties[signer].headers(method, path, content)
    return client.request(method, path, content=content, headers=headers)


def _bodies(provider: Party, consumer: Party) -> dict[str, dict[str, Any]]:
    """A valid body of each JSON route, whose fields the test replaces one at a time."""
    receipt = {"units": 1, "result_hash": "00" * 32, "evidence_hash": "00" * 32,
               "signature": "00" * 64}  # fmt: skip
    return {
        "/offers": offer_terms(provider, selftest={"passed": True, "at_ms": 1, "checks": []}),
        "/jobs": job_request(consumer),
        "escrow": {"escrow": "ab" * 32 + "#0"},
        "registry-account": {"sealed": "c2VhbGVk"},
        "lock": {"transaction": "00"},
        "acceptance": {"signature": "00" * 64},
        "logs": {"lines": ["a line"]},
        "receipt": receipt,
        "failure": {"exit_code": 1, "reason": "out of memory"},
        REPORT_PATH: {"deployments": [row("svc")]},
    }


# Each route that reads path or query values: its method, its path with `{id}` (a job, provider,
# tx, address or channel id) and `{value}` (the drawn value of the named parameter).
PARAM_ROUTES = [
    ("GET", "/jobs/{id}/logs?after={value}"), ("GET", "/jobs?limit={value}"),
    ("GET", "/jobs/{id}"), ("GET", "/jobs/{id}/escrow"), ("GET", "/jobs/{id}/signatures"),
    ("GET", "/jobs/{id}/result"), ("POST", "/jobs/{id}/start"),
    ("GET", "/providers/assignments?timeout_s={value}"), ("GET", "/offers?query={value}"),
    ("GET", "/offers?limit={value}"), ("GET", "/api/explorer/jobs?after={value}"),
    ("GET", "/explorer/jobs?state={value}"), ("GET", "/api/explorer/jobs?gpu={value}"),
    ("GET", "/api/explorer/jobs?provider={value}"), ("GET", "/api/explorer/jobs/{id}"),
    ("GET", "/explorer/blocks/{value}"), ("GET", "/api/explorer/blocks/{value}"),
    ("GET", "/api/explorer/providers?after={value}"), ("GET", "/explorer/providers/{id}"),
    ("GET", "/api/explorer/txs/{id}"), ("GET", "/api/explorer/addresses/{id}?after={value}"),
    ("GET", "/explorer/search?q={value}"), ("GET", "/api/explorer/channels?after={value}"),
    ("GET", "/explorer/channels?state={value}"), ("GET", "/api/explorer/channels?renter={value}"),
    ("GET", "/api/explorer/channels/{id}"), ("GET", "/explorer/channels/{id}"),
    ("GET", "/api/explorer/deployments?after={value}"), ("GET", "/explorer/deployments/{value}"),
    ("GET", "/explorer/deployments?kind={value}"), ("GET", "/api/explorer/deployments/{id}"),
]  # fmt: skip


@st.composite
def param_requests(draw: st.DrawFn, job: str) -> tuple:
    """(method, path, body, signer): a route with a drawn id and parameter value."""
    method, template = draw(st.sampled_from(PARAM_ROUTES))
    ident = quote(draw(st.one_of(st.just(job), PARAM)), safe="%")
    value = quote(draw(PARAM), safe="%")
    signer = draw(st.sampled_from(["provider", "consumer", None]))
    return method, template.format(id=ident, value=value), None, signer


@st.composite
def body_requests(draw: st.DrawFn, job: str, provider: Party, consumer: Party) -> tuple:
    """(method, path, body, signer): a JSON route's valid body with one field (or one field of
    the job's spec) replaced by any JSON value, or a field added, or raw bytes to upload."""
    bodies = _bodies(provider, consumer)
    name = draw(st.sampled_from([*sorted(bodies), "result"]))
    path = name if name.startswith("/") else f"/jobs/{job}/{name}"
    signer = "consumer" if name in ("/jobs", "escrow", "lock", "registry-account") else "provider"
    if name == "result":
        return "PUT", path, draw(st.binary(max_size=64)), signer
    body = dict(bodies[name])
    if name == "/jobs" and draw(st.booleans()):
        spec = dict(body["spec"])
        spec[draw(st.sampled_from(sorted(spec)))] = draw(JSON_VALUE)
        body["spec"] = spec
    elif name == REPORT_PATH and draw(st.booleans()):
        deployed = dict(body["deployments"][0])
        deployed[draw(st.sampled_from([*sorted(deployed), "extra"]))] = draw(JSON_VALUE)
        body["deployments"] = [deployed]
    else:
        body[draw(st.sampled_from([*body, "extra"]))] = draw(JSON_VALUE)
    return "POST", path, body, signer


def never_5xx(market: dict[str, Any], drawn: st.SearchStrategy[tuple]) -> None:
    """Send what `drawn` draws EXAMPLES times: never an answer of 5xx, and a JSON 422 names
    the field of each problem."""
    client, parties = market["client"], market["parties"]

    @hypothesis_settings(max_examples=EXAMPLES, deadline=None, database=None,
                         suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(drawn)
    def answered(request: tuple) -> None:
        method, path, body, signer = request
        answer = send(client, parties, method, path, body, signer)
        assert answer.status_code < 500, (method, path, body, answer.status_code, answer.text)
        if answer.status_code == 422 and "json" in answer.headers["content-type"]:
            assert all(problem["loc"] for problem in answer.json()["detail"]), answer.text

    answered()


def test_no_path_or_query_value_is_answered_5xx(market):
    never_5xx(market, param_requests(market["job"]))


def test_no_json_field_is_answered_5xx(market):
    parties = market["parties"]
    never_5xx(market, body_requests(market["job"], parties["provider"], parties["consumer"]))
