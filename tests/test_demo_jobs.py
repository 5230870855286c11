"""`unchained demo --jobs 3` in the working tree: three consumers submit at once, the provider
daemon runs the three jobs side by side and, their pay being below the ledger's minimum output
(which the market leaves to their provider), settles the three escrows itself in one batch
transaction; the balances agree with the chain and no child process is left."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.demo_check import check_settled, leftovers
from tests.test_demo import REPO

# the demo: its devnet, its market and its daemon with the docker engine
pytestmark = [pytest.mark.devnet, pytest.mark.docker]

RUN_TIMEOUT_S = 300


@pytest.mark.timeout(RUN_TIMEOUT_S + 60)
def test_three_jobs_from_three_consumers_settle_in_one_batch(tmp_path):
    data_dir = tmp_path / "demo"
    done = subprocess.run(
        [sys.executable, "-m", "unchained.cli", "demo", "--jobs", "3", "--exit",
         "--data-dir", str(data_dir)],
        cwd=REPO, stdin=subprocess.DEVNULL, capture_output=True, text=True,
        timeout=RUN_TIMEOUT_S,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert leftovers(str(data_dir)) == []
    check_settled(data_dir, done.stdout, jobs=3)
    assert "spends 3 escrow(s) in one batch" in done.stdout
