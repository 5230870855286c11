"""The README's first command, `bash scripts/demo.sh`, exactly as a newcomer types it: from the
root of a fresh clone of the committed HEAD, with default arguments, no terminal (so the demo
exits once its job is settled); then once more in that clone with `--jobs 3` (the README's
`demo.sh` passes its arguments on), which reuses the first run's virtualenv and image: three
consumers submit at once and the provider daemon settles the three escrows itself in one batch
(their pay is below the ledger's minimum output, which the market leaves to their provider).
Each run settles what it submitted, its balances add up to the lovelace and agree with the
chain, and no child process is left."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from tests.demo_check import check_settled, leftovers

# the demo in a fresh clone: its devnet, its market and its daemon with the docker engine
pytestmark = [pytest.mark.devnet, pytest.mark.docker]

REPO = Path(__file__).resolve().parent.parent
COMMAND = ["bash", "scripts/demo.sh"]  # the README's quick start, word for word
RUN_TIMEOUT_S = 600  # a first run on a fresh machine installs the venv and builds the image


def run_demo(clone: Path, *arguments: str) -> str:
    """The README's command in the clone's root; no terminal, nothing to answer."""
    done = subprocess.run(
        [*COMMAND, *arguments], cwd=clone, stdin=subprocess.DEVNULL, capture_output=True,
        text=True, timeout=RUN_TIMEOUT_S,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert leftovers(str(clone)) == []  # devnet, market and provider daemon all stopped
    print(done.stdout.splitlines()[-1])  # "demo took N s" (setup.sh not counted), for `-s`
    return done.stdout


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
    check_settled(clone / "data" / "demo", first_run, jobs=1)
    assert re.search(r"explorer http://127\.0\.0\.1:\d+/explorer/jobs/[0-9a-f]+$", first_run, re.M)


@pytest.mark.timeout(RUN_TIMEOUT_S + 60)
def test_three_jobs_again_on_what_the_first_run_built_settle_in_one_batch(clone, first_run):
    installed = sorted((clone / ".venv").glob(".installed-*"))
    image = re.search(r"image (\S+)$", first_run, re.M)[1]
    image_id = docker.from_env().images.get(image).id
    stamps = [path.stat().st_mtime_ns for path in installed]

    started = time.monotonic()
    again = run_demo(clone, "--jobs", "3")
    print(f"the second run of {' '.join(COMMAND)} --jobs 3 took {time.monotonic() - started:.0f} s")
    check_settled(clone / "data" / "demo", again, jobs=3)
    assert "spends 3 escrow(s) in one batch" in again
    assert re.search(r"image (\S+)$", again, re.M)[1] == image
    assert docker.from_env().images.get(image).id == image_id  # not rebuilt
    assert len(installed) == 1 and [path.stat().st_mtime_ns for path in installed] == stamps
