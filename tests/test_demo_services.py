"""`unchained demo --services --exit` as a person runs it (a child process, no terminal): three
renters deploy the sample ONNX model, call it a few hundred times, one runs a pod, and the
provider's claim schedule claims every channel in one transaction. What it printed is checked
to the lovelace (each channel's IOUs against its requests and pod seconds, the claims, the
drains, each party's balance), and against the chain it leaves (replayed by a devnet of the
test's own); no child process, container or pod volume of the demo is left."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import docker
import pytest

from provider.config import RunnerSettings
from provider.images.pod import pod_image
from provider.rentals.pods import Pods
from provider.rentals.services import Services
from samples import images as sample_images
from tests.demo_check import HEX64, LOVELACE, balances, chain_balances, leftovers, lovelace
from unchained.demo.services import CALLS, REQUEST_PRICE

pytestmark = [pytest.mark.devnet, pytest.mark.docker]

RUN_TIMEOUT_S = 300
RENTERS = ["renter-1", "renter-2", "renter-3"]


@pytest.fixture(scope="module")
def built() -> None:
    """The demo's images, built before its clock runs (cached: the demo finds them)."""
    client = docker.from_env()
    sample_images.onnx_service_image(client)
    pod_image(client)


@pytest.mark.timeout(RUN_TIMEOUT_S + 60)
def test_the_services_demo_claims_every_channel_in_one_transaction(built, tmp_path: Path):
    data_dir = tmp_path / "demo"
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "unchained.cli", "demo", "--services", "--exit", "--data-dir",
         str(data_dir)], stdin=subprocess.DEVNULL, capture_output=True, text=True,
        timeout=RUN_TIMEOUT_S,
    )  # fmt: skip
    took_s = time.monotonic() - started
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    print(f"unchained demo --services --exit took {took_s:.0f} s")
    assert leftovers(str(data_dir)) == []  # devnet, market, daemon and gateway all stopped
    settings = RunnerSettings(state_dir=data_dir / "provider")
    assert Services(docker.from_env(), settings).leftovers() == {"containers": [], "networks": []}
    pods = Pods(docker.from_env(), settings)
    assert pods.leftovers() == {"containers": [], "networks": [], "workspaces": []}

    # the first IOU claimed alone, then every channel in one transaction, then any IOU signed
    # after that round (a later round of the schedule, or the closes): every claim printed once
    claim = rf"claim: tx {HEX64} \(block \d+, fee {LOVELACE}\)"
    first = re.findall(rf"^   {claim} claims (\d+) channel", out, re.M)
    assert [count for _, count in first] == ["1"], out
    batch = re.findall(rf"^   {claim} settles (\d+) channel\(s\) in one transaction", out, re.M)
    assert [count for _, count in batch] == ["3"], out
    every = re.findall(rf"^   (?:round |close )?claim: tx ({HEX64}) \(block \d+, fee {LOVELACE}\)",
                       out, re.M)  # fmt: skip
    assert len({tx_id for tx_id, _ in every}) == len(every), out
    claim_fees = sum(lovelace(fee) for _, fee in every)

    earned = 0
    for name in RENTERS:
        assert re.search(rf"{name} funded with 100\.000000 ADA .*: tx {HEX64}", out)
        open_fee, locked = (lovelace(n) for n in re.search(
            rf"{name}: channel [0-9a-f]{{56}}: open tx {HEX64} \(fee {LOVELACE}\) locks {LOVELACE}",
            out).groups())  # fmt: skip
        requests, served = re.search(
            rf"{name}: model-\d stopped, (\d+) requests x [\d,]+ lovelace = {LOVELACE}", out
        ).groups()  # fmt: skip
        assert int(requests) == CALLS and lovelace(served) == CALLS * REQUEST_PRICE
        signed = lovelace(re.search(rf"{name}: model-\d .* signed {LOVELACE} in all", out)[1])
        pod = re.search(rf"lab: stopped after (\d+) s x (\d+) lovelace = {LOVELACE}", out)
        seconds = int(pod[1]) * int(pod[2]) if name == RENTERS[-1] else 0
        assert seconds > 0 or name != RENTERS[-1]
        assert signed == CALLS * REQUEST_PRICE + seconds  # its requests and its pod's seconds
        claimed = lovelace(re.search(rf"{name}'s channel: claimed {LOVELACE} \(its last IOU\)",
                                     out)[1])  # fmt: skip
        assert claimed == signed
        close_fee = lovelace(re.search(rf"{name}: closing: tx {HEX64} \(fee {LOVELACE}\)", out)[1])
        drain_fee, returned = (lovelace(n) for n in re.search(
            rf"{name}: drained: tx {HEX64} \(fee {LOVELACE}\) returns {LOVELACE}", out
        ).groups())  # fmt: skip
        assert returned == locked - claimed
        assert balances(out, name)[2] == -(claimed + open_fee + close_fee + drain_fee)
        earned += claimed
    assert balances(out, "provider")[2] == earned - claim_fees
    assert balances(out, "market")[2] == 0
    assert out.count("every answer NumPy's forward pass") == len(RENTERS)
    assert re.search(r"explorer http://127\.0\.0\.1:\d+/explorer/deployments/\d+ \(pod lab\)", out)
    assert "Checked: the provider earned exactly the renters' last IOUs" in out
    assert re.search(r"^demo took \d+ s$", out, re.MULTILINE), out

    parties = ["provider", *RENTERS, "market"]
    printed = {party: balances(out, party)[1] for party in parties}
    assert chain_balances(data_dir, out, parties) == printed
