"""`unchained doctor` and `unchained deploy`'s network check against real set-ups: the devnet
with a deployment and a funded wallet (all good), and each misfit made real here: a wrong
network setting, a dead Ogmios port, a deployment file from another chain, an empty wallet,
a chain whose clock runs ahead of this machine's (devnet time travel). A node still syncing
and an Ogmios 7 cannot run here: the labelled stand-in of tests/chain/ogmios_standin.py serves
them."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from pycardano import PaymentSigningKey
from typer.testing import CliRunner, Result

from devnet.process import DevnetProcess, free_port
from offchain.chain.ogmios import request, utxo_lovelace
from offchain.protocol.tx import deployment_file
from tests.chain.ogmios_standin import Running, StandIn
from unchained.cli import app

CHECKS = ("ogmios", "version", "node", "network", "deployment", "cbor", "wallet", "clock")


def invoke(*args: str | Path) -> Result:
    return CliRunner().invoke(app, [str(a) for a in args])


def findings(result: Result) -> dict[str, tuple[str, str]]:
    """check -> (status, detail), from doctor's lines."""
    rows = [line.split(None, 2) for line in result.stdout.splitlines()[:-1]]
    return {check: (status, detail) for status, check, detail in rows}


@pytest.fixture(scope="module")
def devnet(tmp_path_factory) -> Iterator[DevnetProcess]:
    """A chain of this module's own: other tests time-travel the session's, whose clock the
    doctor's clock check would then find ahead of this machine's."""
    process = DevnetProcess(tmp_path_factory.mktemp("doctor-devnet") / "data").start()
    yield process
    process.stop()


@pytest.fixture(scope="module")
def deployed(devnet, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("doctor") / "deployment.json"
    wallet = devnet.data_dir / "wallets" / "market.skey"
    done = invoke("deploy", "--wallet", wallet, "--ogmios-url", devnet.url, "--deployment", path)
    assert done.exit_code == 0, done.output
    assert "deployed on devnet (magic 42)" in done.stdout
    return path


def doctor(url: str, deployment: Path, *extra: str | Path) -> Result:
    return invoke("doctor", "--ogmios-url", url, "--deployment", deployment, *extra)


def test_the_deployment_file_records_its_network_and_a_point_before_it(devnet, deployed):
    record = deployment_file.read_record(deployed)
    assert record.network_magic == 42 and record.network_id == 0
    assert record.published_after is not None and record.published_after["slot"] > 0


def test_doctor_finds_the_devnet_set_up_all_good(devnet, deployed):
    result = doctor(devnet.url, deployed, "--wallet", devnet.data_dir / "wallets" / "market.skey")
    assert result.exit_code == 0, result.output
    found = findings(result)
    assert list(found) == list(CHECKS) and all(s == "ok" for s, _ in found.values()), found
    assert "v6.14.0" in found["ogmios"][1] and found["network"][1] == (
        "the node runs devnet (magic 42)"
    )
    assert "--include-cbor" in found["cbor"][1]
    assert result.stdout.endswith("all checks passed\n")


def test_doctor_refuses_a_wrong_network_setting_naming_both(devnet, deployed):
    result = doctor(devnet.url, deployed, "--network", "preprod")
    assert result.exit_code == 1
    found = findings(result)
    assert found["network"] == ("FAIL", f"the node behind {devnet.url} runs devnet (magic 42), "
                                "but the network setting is preprod (magic 1): set --network "
                                "(or UNCHAINED_NETWORK) to devnet, or point --ogmios-url at a "
                                "preprod node")  # fmt: skip
    assert found["deployment"] == ("skip", "needs network")
    assert found["version"][0] == found["clock"][0] == "ok"


def test_doctor_says_what_to_start_when_nothing_answers(deployed):
    url = f"ws://127.0.0.1:{free_port()}"
    result = doctor(url, deployed)
    assert result.exit_code == 1
    found = findings(result)
    status, detail = found["ogmios"]
    assert status == "FAIL" and f"nothing answers at {url}" in detail
    assert "start Ogmios, or point --ogmios-url (UNCHAINED_OGMIOS_URL) at it" in detail
    assert all(found[check][0] == "skip" for check in CHECKS[1:])


def test_doctor_finds_an_empty_wallet_and_says_to_fund_it(devnet, deployed, tmp_path):
    key = tmp_path / "empty.skey"
    PaymentSigningKey.generate().save(str(key))
    result = doctor(devnet.url, deployed, "--wallet", key)
    assert result.exit_code == 1
    status, detail = findings(result)["wallet"]
    assert status == "FAIL", detail
    assert "holds 0.000000 ADA, less than 5.000000 ADA: fund it" in detail


def test_on_a_fresh_chain_doctor_refuses_the_other_chains_deployment_and_a_skewed_clock(
    own_devnet, deployed
):
    """A devnet of the test's own is another chain: the file's scripts are not on it. Then
    the chain travels two hours ahead of this machine's clock (its slots last 100 ms)."""
    result = doctor(own_devnet.url, deployed)
    assert result.exit_code == 1
    found = findings(result)
    status, detail = found["deployment"]
    assert status == "FAIL" and "is not on this chain (another chain or a fresh devnet?)" in detail
    assert found["cbor"] == ("skip", "needs deployment") and found["clock"][0] == "ok"
    asyncio.run(request(own_devnet.url, "devnet/advanceTime", {"slots": 2 * 3600 * 10}))
    status, detail = findings(doctor(own_devnet.url, deployed))["clock"]
    assert status == "FAIL" and "s ahead of this machine's clock: set the clock right" in detail


def test_deploy_refuses_another_networks_node_before_signing(devnet, tmp_path):
    path = tmp_path / "deployment.json"
    wallet = devnet.data_dir / "wallets" / "market.skey"
    payer = str(devnet.address("market"))
    before = utxo_lovelace(devnet.url, {"addresses": [payer]})
    result = invoke("deploy", "--wallet", wallet, "--ogmios-url", devnet.url,
                    "--deployment", path, "--network", "mainnet")  # fmt: skip
    assert result.exit_code == 1
    assert "runs devnet (magic 42), but the network setting is mainnet" in result.stderr
    assert not path.exists()
    assert utxo_lovelace(devnet.url, {"addresses": [payer]}) == before


def test_doctor_on_a_node_still_syncing_and_before_the_deploy(tmp_path):
    """A fresh preprod node (served by the labelled stand-in: no real node runs here) half
    synced, and no deployment file yet: what a newcomer meets first."""
    with Running(StandIn("v6.14.0", magic=1, synchronization=0.5)) as ogmios:
        result = doctor(ogmios.url, tmp_path / "deployment.json", "--network", "preprod")
    assert result.exit_code == 1
    found = findings(result)
    assert found["node"] == ("FAIL", "the node is 50.00% synced: wait until it reaches the "
                             "tip before deploying or serving")  # fmt: skip
    assert found["network"] == ("ok", "the node runs preprod (magic 1)")
    status, detail = found["deployment"]
    assert status == "FAIL" and "deploy the contracts first" in detail
    assert found["clock"] == ("skip", "needs node") and found["wallet"][0] == "skip"


def test_doctor_on_an_ogmios_7_says_which_to_run(tmp_path):
    with Running(StandIn("v7.0.0")) as ogmios:
        result = doctor(ogmios.url, tmp_path / "deployment.json")
    found = findings(result)
    assert result.exit_code == 1 and found["version"][0] == "FAIL"
    assert "run Ogmios 6.x" in found["version"][1]
    assert found["deployment"] == ("skip", "needs version")
