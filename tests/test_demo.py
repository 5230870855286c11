"""`unchained demo` end to end, as a user runs it (its own process, devnet and container): it
settles the escrow it locked, and its balances add up to the lovelace."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from offchain.devnet.process import free_port
from unchained.demo import FEE_ALLOWANCE

LOVELACE = r"(-?[\d,]+\.\d{6}) ADA"


def lovelace(text: str) -> int:
    return int(text.replace(",", "").replace(".", ""))


def balances(out: str, party: str) -> list[int]:
    """Before, after and change of one party, from the demo's balance table."""
    row = re.search(rf"{party} +{LOVELACE} +{LOVELACE} +\+?{LOVELACE}", out)
    return [lovelace(value) for value in row.groups()]


@pytest.mark.timeout(600)  # the first run on a machine builds the job's image (about a minute)
def test_the_demo_settles_its_escrow_and_its_balances_add_up(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "unchained.cli", "demo", "--port", str(free_port()),
         "--data-dir", str(tmp_path / "demo")],
        capture_output=True, text=True, timeout=590,
    )  # fmt: skip
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    escrow = re.search(r"escrow ([0-9a-f]{64}#0) holds", out)[1]
    assert re.search(rf"settled escrow {escrow}: tx [0-9a-f]{{64}}", out)
    for step in ("deploy", "lock"):
        assert re.search(rf"{step}: tx [0-9a-f]{{64}} \(block \d+, fee", out)
    assert re.search(r"consumer funded with 100\.000000 ADA: tx [0-9a-f]{64}", out)

    units, price = (
        int(n.replace(",", "")) for n in re.search(r"(\d+) units x ([\d,]+)", out).groups()
    )
    lock_fee = lovelace(re.search(rf"lock: tx \w+ \(block \d+, fee {LOVELACE}", out)[1])
    settle_fee = lovelace(re.search(rf"settled escrow .* fee {LOVELACE}", out)[1])
    assert balances(out, "provider") == [0, units * price, units * price]
    assert balances(out, "consumer")[2] == -(units * price + FEE_ALLOWANCE + lock_fee)
    assert balances(out, "market")[2] == FEE_ALLOWANCE - settle_fee
    assert (tmp_path / "demo" / "deployment.json").exists()
