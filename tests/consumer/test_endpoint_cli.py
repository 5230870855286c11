"""`unchained endpoint call|list` as a user runs them (a real process) against a test double of
the provider's gateway (tests/consumer/endpoint_double.py, uvicorn): the answer and what it
cost, each call one price more on the channel recorded in the state directory, and the
mistakes answered with what to do. And `endpoint --help` starts without the heavy modules."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from consumer.sdk.channel_store import ChannelStore
from offchain.protocol.job.jobspec import load_servicespec
from offchain.protocol.tx.deployment_file import DeploymentFile
from tests.consumer.cli import UNCHAINED
from tests.consumer.endpoint_double import GatewayDouble, serving
from tests.consumer.test_channels import CHANNEL_HASH, NETWORK_ID, record
from tests.consumer.test_endpoint_client import CHANNEL, PRICE
from tests.test_cli_imports import heavy, imported

pytestmark = pytest.mark.slow  # each test runs `unchained` as a child process
REF = "00" * 32 + "#0"


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[tuple[GatewayDouble, str, dict[str, str]]]:
    with renting(tmp_path) as rented:
        yield rented


@contextmanager
def renting(tmp_path: Path) -> Iterator[tuple[GatewayDouble, str, dict[str, str]]]:
    """A key, its channel recorded in a state directory, a deployment file naming the channel
    script, and the gateway double serving endpoint `echo` on that channel; the environment
    that points `unchained` at the first three."""
    from pycardano import PaymentSigningKey

    from consumer.sdk.keys import ConsumerKey

    key = ConsumerKey(PaymentSigningKey.generate())
    key.key.save(str(tmp_path / "consumer.skey"))
    ChannelStore(tmp_path / "state").save(record(key, CHANNEL))
    write_deployment(tmp_path / "deployment.json", NETWORK_ID, CHANNEL_HASH.payload)
    env = {**os.environ, "UNCHAINED_CONSUMER_KEY": str(tmp_path / "consumer.skey"),
           "UNCHAINED_CONSUMER_STATE_DIR": str(tmp_path / "state"),
           "UNCHAINED_DEPLOYMENT": str(tmp_path / "deployment.json"), "COLUMNS": "120"}  # fmt: skip
    double = GatewayDouble(key.vkey, NETWORK_ID, CHANNEL_HASH, bytes.fromhex(CHANNEL), PRICE)
    with serving(double) as url:
        yield double, url, env


def write_deployment(path: Path, network_id: int, channel_hash: bytes) -> None:
    """A deployment file naming `channel_hash` on `network_id` (its other fields made up)."""
    hashes = {f"{n}_hash": "00" * 28 for n in ("escrow", "bond", "settle", "claim")}
    deployment = DeploymentFile(
        network_id=network_id, notice_ms=0, slash_share_bps=0, refund_window_ms=0,
        escrow_ref=REF, bond_ref=REF, settle_ref=REF, channel_ref=REF, claim_ref=REF,
        channel_hash=channel_hash.hex(), **hashes,
    )  # fmt: skip
    path.write_text(deployment.model_dump_json())


def unchained(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*UNCHAINED, *args], env=env, capture_output=True, text=True,
                          timeout=120)  # fmt: skip


def call_json(env: dict[str, str], url: str, *args: str) -> tuple[int, Any]:
    done = unchained(env, "endpoint", "call", "echo", "--gateway", url, "--channel", CHANNEL[:10],
                     *args, "--json")  # fmt: skip
    return done.returncode, json.loads(done.stdout)


def test_call_prints_the_answer_and_what_it_paid(setup):
    double, url, env = setup
    code, first = call_json(env, url, "--data", '{"x": [1, 2]}')
    assert code == 0, first
    assert first["answer"] == {"method": "POST", "path": "predict", "body": '{"x":[1,2]}'}
    assert (first["status"], first["paid"], first["total"], first["price"]) == (
        200, PRICE, PRICE, PRICE)  # fmt: skip
    code, second = call_json(env, url, "--data", "{}", "--path", "/v1/embed", "--method", "put")
    assert code == 0 and second["answer"]["method"] == "PUT", second
    assert second["answer"]["path"] == "v1/embed"
    assert (second["paid"], second["total"]) == (PRICE, 2 * PRICE)  # a new process goes on
    assert [iou.amount for iou in double.ious] == [PRICE, 2 * PRICE]

    done = unchained(env, "endpoint", "call", "echo", "--gateway", url, "--channel", CHANNEL,
                     "--data", "[3]")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert '"body": "[3]"' in done.stdout
    assert f"HTTP 200; paid 0.002000 ADA (0.006000 ADA in all on channel {CHANNEL[:16]})" in (
        done.stdout)  # fmt: skip


def test_an_error_answer_is_shown_paid_and_exits_1(setup):
    _, url, env = setup
    code, missing = call_json(env, url, "--data", "{}", "--path", "/missing")
    assert code == 1 and missing["status"] == 404 and missing["paid"] == PRICE, missing


def test_a_greedy_gateway_is_refused(setup):
    double, url, env = setup
    double.served = 10 * PRICE  # it claims requests this renter never received
    code, refused = call_json(env, url, "--data", "{}")
    assert code == 1 and refused["error"] == "EndpointRefused", refused
    assert (refused["due"], refused["received"], refused["sent"]) == (11 * PRICE, 0, PRICE)
    assert "more than the 0.000000 ADA received" in refused["message"]


def test_mistakes_are_told(setup, tmp_path: Path):
    double, url, env = setup
    code, bad = call_json(env, url, "--data", "{nope")
    assert code == 1 and "--data is not JSON" in bad["message"], bad
    done = unchained(env, "endpoint", "call", "nothere", "--gateway", url, "--channel", CHANNEL,
                     "--data", "{}", "--json")  # fmt: skip
    assert done.returncode == 1 and "has no endpoint 'nothere': it has echo" in done.stdout
    code, unknown = call_json({**env, "UNCHAINED_CONSUMER_STATE_DIR": str(tmp_path / "other")},
                              url, "--data", "{}")  # fmt: skip
    assert code == 1 and f"no channel {CHANNEL[:10]}" in unknown["message"], unknown
    code, gone = call_json(env, "http://127.0.0.1:9", "--data", "{}")
    assert code == 1 and "cannot reach the gateway at http://127.0.0.1:9" in gone["message"]
    assert double.ious == []


def test_list_shows_the_endpoints_and_prices(setup):
    _, url, env = setup
    done = unchained(env, "endpoint", "list", "--gateway", url, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [
        {"name": "echo", "price_per_request": PRICE, "price_per_second": 0}
    ]
    table = unchained(env, "endpoint", "list", "--gateway", url).stdout
    assert "echo" in table and "0.002000 ADA" in table, table


@pytest.mark.parametrize("args", [("endpoint", "--help"), ("endpoint", "call", "--help"),
                                  ("endpoint", "deploy", "--help")])  # fmt: skip
def test_the_help_imports_nothing_heavy(args, tmp_path: Path):
    done, modules = imported(*args, cwd=tmp_path)
    assert done.returncode == 0 and "Usage" in done.stdout, done.stderr[-2000:]
    assert heavy(modules) == []


def test_init_writes_a_commented_service_spec_that_loads(tmp_path: Path):
    done, modules = imported("endpoint", "init", cwd=tmp_path)
    assert done.returncode == 0 and "`unchained endpoint deploy svc.yaml`" in done.stdout, done
    assert heavy(modules) == []
    written = (tmp_path / "svc.yaml").read_text()
    assert written.count("\n#") >= 5  # commented, as `job init`'s
    spec = load_servicespec(tmp_path / "svc.yaml")
    assert (spec.port, spec.health_path, spec.price_per_request) == (8000, "/health", 10_000)
    again, _ = imported("endpoint", "init", cwd=tmp_path)
    assert again.returncode == 1 and "svc.yaml exists (use --force" in again.stdout + again.stderr


def test_init_writes_the_llm_example_that_loads_as_an_llm_spec(tmp_path: Path):
    done, _ = imported("endpoint", "init", "--example", "llm", "chat.yaml", cwd=tmp_path)
    assert done.returncode == 0 and "`unchained endpoint deploy chat.yaml`" in done.stdout, done
    spec = load_servicespec(tmp_path / "chat.yaml")
    assert (spec.kind, spec.image) == ("llm", "unchained/llm-service:latest")
    assert (spec.price_per_input_token, spec.price_per_output_token) == (2, 8)  # type: ignore[attr-defined]
