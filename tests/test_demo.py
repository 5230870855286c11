"""The README's first command, `bash scripts/demo.sh`, exactly as a newcomer types it: from the
root of a fresh clone of the committed HEAD, with default arguments, twice (the second run
reuses the first's virtualenv and image). Each run must settle the escrow it locked, its
balances must add up to the lovelace, and the chain the demo leaves behind must agree."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from offchain.chain.context import chain_context
from offchain.devnet.process import DevnetProcess
from unchained.demo import FEE_ALLOWANCE

REPO = Path(__file__).resolve().parent.parent
COMMAND = ["bash", "scripts/demo.sh"]  # the README's quick start, word for word
RUN_TIMEOUT_S = 600  # a first run on a fresh machine installs the venv and builds the image
LOVELACE = r"(-?[\d,]+\.\d{6}) ADA"
PARTIES = ("provider", "consumer", "market")


def lovelace(text: str) -> int:
    return int(text.replace(",", "").replace(".", ""))


def balances(out: str, party: str) -> list[int]:
    """Before, after and change of one party, from the demo's balance table."""
    row = re.search(rf"{party} +{LOVELACE} +{LOVELACE} +\+?{LOVELACE}", out)
    return [lovelace(value) for value in row.groups()]


def run_demo(clone: Path) -> str:
    """The README's command in the clone's root; no terminal, nothing to answer."""
    done = subprocess.run(
        COMMAND, cwd=clone, stdin=subprocess.DEVNULL, capture_output=True, text=True,
        timeout=RUN_TIMEOUT_S,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def chain_balances(data_dir: Path, out: str) -> dict[str, int]:
    """Each party's lovelace on the chain the demo left in `data_dir` (replayed by a devnet
    of the test's own, on a free port), at the addresses the demo printed."""
    devnet = DevnetProcess(data_dir / "devnet").start()
    try:
        context = chain_context(devnet.url)
        found = {}
        for party in PARTIES:
            address = re.search(rf"^   {party} +(addr_test1\w+)", out, re.MULTILINE)[1]
            found[party] = sum(utxo.output.amount.coin for utxo in context.utxos(address))
        return found
    finally:
        devnet.stop()


def check_settled(clone: Path, out: str) -> None:
    """The escrow the run locked was settled, its numbers add up and the chain agrees."""
    data_dir = clone / "data" / "demo"
    assert f"deployment file {data_dir / 'deployment.json'}" in out  # the default, made absolute
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
    printed = {party: balances(out, party)[1] for party in PARTIES}
    assert chain_balances(data_dir, out) == printed


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """What a newcomer gets: a fresh clone of the committed HEAD, nothing built in it."""
    target = tmp_path_factory.mktemp("newcomer").resolve() / "unchained"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(target)], check=True)
    yield target
    shutil.rmtree(target)  # its virtualenv alone is hundreds of MB


@pytest.fixture(scope="module")
def first_run(clone: Path) -> str:
    return run_demo(clone)


@pytest.mark.timeout(RUN_TIMEOUT_S + 60)
def test_the_readme_demo_settles_its_job_from_a_fresh_clone(clone, first_run):
    check_settled(clone, first_run)


@pytest.mark.timeout(RUN_TIMEOUT_S + 60)
def test_the_readme_demo_runs_again_on_what_the_first_run_built(clone, first_run):
    installed = sorted((clone / ".venv").glob(".installed-*"))
    image = re.search(r"image (\S+),", first_run)[1]
    image_id = docker.from_env().images.get(image).id
    stamps = [path.stat().st_mtime_ns for path in installed]

    again = run_demo(clone)
    check_settled(clone, again)
    assert re.search(r"image (\S+),", again)[1] == image
    assert docker.from_env().images.get(image).id == image_id  # not rebuilt
    assert len(installed) == 1 and [path.stat().st_mtime_ns for path in installed] == stamps
