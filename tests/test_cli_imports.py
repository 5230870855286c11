"""`unchained` starts at once: `unchained --help`, a component's `--help` and `unchained job
list` on an empty store import none of the modules that take seconds (pycardano, the Ogmios
client, the OpShin compiler, the market's server, docker); `unchained --help`, `job list` and
`offers search` not even those that take a tenth of one (httpx, asyncio, pydantic, which
typer 0.29 imports for every option: pyproject.toml keeps it below; rich's help panels).
The commands that read the chain or sign for it with a plain key import no pycardano either:
`wallet address` (the key's address), `job status` (the market alone) and `wallet balance`
(one Ogmios query) not even the lighter ones bar the Ogmios client's WebSocket, `endpoint call`
(an IOU signed, one paid request) none bar its HTTP client.
Checked in a child process with the modules it holds when it exits, as a user's shell runs
it; the time itself is measured by bench/consumer.py, not here (it depends on the machine)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from consumer.sdk.keys import new_wallet
from unchained.cli import COMPONENTS, load

HEAVY = ("pycardano", "opshin", "uplc", "pluthon", "ogmios", "fastapi", "starlette", "uvicorn",
         "sqlalchemy", "sqlmodel", "alembic", "psycopg", "docker", "jinja2", "cose",
         "websockets.asyncio", "websockets.sync", "offchain.market.app", "devnet.node",
         "offchain.protocol.ledger.types", "contracts.scripts")  # fmt: skip
# What `unchained --help` and the commands that only read the market load on top of typer:
# each of these took 30 to 200 ms of their start (bench/consumer.py's cli_start_s).
STARTUP = (*HEAVY, "httpx", "httpcore", "anyio", "h11", "asyncio", "pydantic", "pydantic_core",
           "websockets", "rich", "yaml")  # fmt: skip
# `wallet balance`: the synchronous WebSocket client its Ogmios query is sent with, no more.
CHAIN_READ = (*(m for m in STARTUP if not m.startswith("websockets")), "websockets.asyncio")
# `endpoint call`: httpx (whose own command line imports rich), which the SDK's client is on.
PAID_REQUEST = tuple(m for m in STARTUP if m not in ("httpx", "httpcore", "anyio", "h11", "rich"))
# `python -m unchained.cli ARGS`, writing the names of the modules loaded when it exits
RUN = """import atexit, json, runpy, sys
out = sys.argv.pop(1)
atexit.register(lambda: open(out, "w").write(json.dumps(sorted(sys.modules))))
sys.argv[0] = "unchained"
runpy.run_module("unchained.cli", run_name="__main__", alter_sys=True)
"""


def imported(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """Run `unchained ARGS` in a fresh interpreter (in `env`, else this one's); what it printed
    and every module loaded by the time it exits."""
    env = {**(os.environ if env is None else env), "COLUMNS": "200"}
    report = cwd / "modules.json"
    done = subprocess.run([sys.executable, "-c", RUN, str(report), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    modules = set(json.loads(report.read_text()))
    report.unlink()
    assert {"unchained", "typer"} <= modules, done.stderr[-2000:]
    return done, modules


def heavy(modules: set[str], names: tuple[str, ...] = HEAVY) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(f"{h}.") for h in names))


def test_help_lists_every_component_and_imports_none(tmp_path: Path):
    done, modules = imported("--help", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    for name, component in COMPONENTS.items():
        assert f" {name} " in done.stdout and component.help in done.stdout, done.stdout
    assert heavy(modules, STARTUP) == []
    assert not {component.module for component in COMPONENTS.values()} & modules


@pytest.mark.parametrize("name", COMPONENTS)
def test_each_component_is_listed_with_its_own_help(name: str):
    assert load(name).help == COMPONENTS[name].help


@pytest.mark.parametrize("component", sorted(COMPONENTS))
def test_a_component_help_imports_nothing_heavy(component: str, tmp_path: Path):
    done, modules = imported(component, "--help", cwd=tmp_path)
    assert done.returncode == 0 and COMPONENTS[component].help in done.stdout, done.stderr
    assert heavy(modules) == []


def test_job_list_on_an_empty_store_imports_nothing_heavy(tmp_path: Path):
    state = tmp_path / "state"
    done, modules = imported("job", "list", "--local", "--json", "--state-dir", str(state),
                             cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0 and json.loads(done.stdout) == [], done.stderr[-2000:]
    assert heavy(modules, STARTUP) == []


@pytest.mark.parametrize("command", [("job", "list"), ("offers", "search"),
                                     ("job", "status", "0" * 32)])  # fmt: skip
def test_a_market_read_with_a_plain_key_imports_nothing_heavy(command, tmp_path: Path):
    """The request is signed (a plain key needs no pycardano) and sent with the standard
    library's client: here to a port where no market listens, so the answer is the refusal
    that names the market's URL. (Against a real market: bench/consumer.py, and the consumer's
    CLI tests.)"""
    new_wallet(tmp_path / "consumer.skey", mnemonic=False)
    with socket.socket() as bound:  # bound, not listening: a connection to it is refused
        bound.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{bound.getsockname()[1]}"
        args = ["--key", "consumer.skey", "--state-dir", "state", "--market-url", url]
        done, modules = imported(*command, "--json", *args, cwd=tmp_path)
    error = json.loads(done.stdout)
    assert done.returncode == 1 and error["error"] == "MarketRefused", error
    assert f"cannot reach the market at {url}" in error["message"]
    assert heavy(modules, STARTUP) == []


def test_wallet_address_reads_the_key_alone(tmp_path: Path):
    made = new_wallet(tmp_path / "consumer.skey", mnemonic=False)
    done, modules = imported("wallet", "address", "--key", "consumer.skey", "--json",
                             cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == {"address": str(made.address)}
    assert heavy(modules, STARTUP) == []


def test_wallet_balance_is_one_ogmios_query(tmp_path: Path):
    """Against an Ogmios double that answers every UTxO query with none: no chain context,
    no deployment, only the query (the balance itself: tests/consumer/test_cli_smoke.py)."""
    made = new_wallet(tmp_path / "consumer.skey", mnemonic=False)
    with ogmios_double() as url:
        args = ["--key", "consumer.skey", "--state-dir", "state", "--ogmios-url", url, "--json"]
        done, modules = imported("wallet", "balance", *args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == {"address": str(made.address), "lovelace": 0,
                                       "locked_lovelace": 0, "channels_lovelace": 0,
                                       "total_lovelace": 0}  # fmt: skip
    assert heavy(modules, CHAIN_READ) == []


@contextmanager
def ogmios_double() -> Iterator[str]:
    """A WebSocket server answering every JSON-RPC request with an empty list; its URL."""
    from websockets.sync.server import ServerConnection, serve

    def answer(connection: ServerConnection) -> None:
        for message in connection:
            request = json.loads(message)
            connection.send(json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": []}))

    with serve(answer, "127.0.0.1", 0) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            yield f"ws://127.0.0.1:{server.socket.getsockname()[1]}"
        finally:
            server.shutdown()


def test_an_endpoint_call_signs_and_pays_with_its_http_client_alone(tmp_path: Path):
    """A paid request to a gateway double (tests/consumer/test_endpoint_cli.py's), the IOU
    signed with a plain key for the deployment file's channel script: no pycardano, no
    pydantic, no asyncio."""
    from tests.consumer.test_endpoint_cli import renting  # it imports this module

    with renting(tmp_path) as (double, url, env):
        done, modules = imported("endpoint", "call", "echo", "--gateway", url, "--channel",
                                 double.channel.hex(), "--data", "{}", "--json", cwd=tmp_path,
                                 env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["paid"] == double.price == double.ious[-1].amount
    assert heavy(modules, PAID_REQUEST) == []


CHAIN_COMMANDS = [("job", "lock"), ("job", "submit"), ("tx", "submit"), ("provider", "status"),
                  ("provider", "bond", "unbond"), ("wallet", "fund")]  # fmt: skip


@pytest.mark.parametrize("command", CHAIN_COMMANDS)
def test_a_chain_command_help_imports_nothing_heavy(command: tuple[str, ...], tmp_path: Path):
    done, modules = imported(*command, "--help", cwd=tmp_path)
    assert done.returncode == 0 and "Usage" in done.stdout, done.stderr[-2000:]
    assert heavy(modules) == []


@pytest.mark.slow  # the child imports pycardano: seconds
def test_a_chain_command_loads_the_committed_scripts_without_the_compiler(tmp_path: Path):
    """`job refund` opens the chain and reads the deployment (here: there is none), importing
    what loads the validators, and neither the OpShin compiler nor `uplc`: they took seconds
    of every chain command."""
    new_wallet(tmp_path / "consumer.skey", mnemonic=False)
    args = ["--key", "consumer.skey", "--state-dir", "state", "--deployment", "none.json",
            "--ogmios-url", "ws://127.0.0.1:9", "--json"]  # fmt: skip
    done, modules = imported("job", "refund", "0" * 32, *args, cwd=tmp_path)
    assert done.returncode == 1 and "no deployment file at" in done.stdout, done.stdout
    assert {"pycardano", "contracts.artifacts", "offchain.protocol.tx.deployment_file"} <= modules
    compilers = ("opshin", "uplc", "pluthon", "contracts.scripts", "contracts.onchain")
    assert [m for m in modules if m.split(".")[0] in compilers or m in compilers] == []


def test_a_mistyped_component_is_suggested_without_importing_any(tmp_path: Path):
    done, modules = imported("jbo", "list", cwd=tmp_path)
    assert done.returncode == 2 and "Did you mean 'job'?" in done.stderr, done.stderr
    assert not {component.module for component in COMPONENTS.values()} & modules
