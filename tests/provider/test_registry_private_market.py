"""A private image's job on the devnet market, end to end, with a real provider daemon that
pulls: the renter (`unchained job submit --registry-auth`, a real process) pins the image with
its account from a docker config file and seals the account to the quoted provider's key; the
market stores and hands on only ciphertext; the daemon opens it, pulls with it and runs the
job, which is settled. Wrong credentials, and a private tag the renter did not pin, are refused
before anything is locked (the SDK). The account's password is nowhere in the market's
database, its API answers, its explorer or the daemon's log; the sealed text is in no answer
either."""

from __future__ import annotations

import asyncio
import base64
import json
import os
from pathlib import Path

import httpx
import pytest
import yaml

from consumer.sdk.client import MarketClient
from consumer.sdk.keys import ConsumerKey
from consumer.sdk.registry_login import RegistryLogins
from consumer.sdk.session import Consumer
from consumer.sdk.store import JobStore
from offchain.protocol.api.market_errors import MarketRefused
from offchain.protocol.job.jobspec import parse_jobspec
from offchain.protocol.job.registry import NeedsCredentials
from tests.consumer.cli import run_json
from tests.market.client import serve
from tests.protocol.onchain import wallet
from tests.provider.daemon_harness import IDENTITY, new_provider, settling_market, spec
from tests.registry import forget
from tests.token_service import ACCOUNT, GuardedRegistry


def docker_config(path: Path, host: str, user: str, password: str) -> Path:
    auth = base64.b64encode(f"{user}:{password}".encode()).decode()
    path.write_text(json.dumps({"auths": {f"http://{host}": {"auth": auth}}}))
    return path


async def until_state(consumer: Consumer, job: str, states: set[str]) -> str:
    """The job's state once it is one of `states` (polled: the market moves it)."""
    for _ in range(600):
        state = (await consumer.status(job)).state
        if state in states:
            return state
        await asyncio.sleep(0.2)
    raise AssertionError(f"job {job} stayed {state}")


async def test_a_private_image_job_runs_with_the_sealed_account_and_is_settled(
    devnet, tmp_path, client, busybox, guarded: GuardedRegistry
):
    private = guarded.push(client, busybox, "private/busybox")
    forget(client, private)  # the provider must pull it, with the renter's account
    bare = f"private/busybox:{busybox.rsplit(':', 1)[1]}"  # read in the default registry
    deployment_file, deployment, settings = await settling_market(devnet, tmp_path)
    settings = settings.model_copy(
        update={"local_registries": True, "default_registry": guarded.host}
    )
    right = docker_config(tmp_path / "right.json", guarded.host, ACCOUNT.username,
                          ACCOUNT.password)  # fmt: skip
    wrong = RegistryLogins.read(docker_config(tmp_path / "wrong.json", guarded.host,
                                              ACCOUNT.username, "not-it"))  # fmt: skip
    with serve(settings) as url:
        daemon, _provider = await new_provider(devnet, tmp_path, deployment_file, url, bundles=1)
        pulling = daemon.config.read_text().replace("[runner]\n", "[runner]\npull_images = true\n")
        daemon.config.write_text(pulling)
        renter = await wallet(devnet)
        renter.key.save(str(tmp_path / "consumer.skey"))
        key = ConsumerKey(renter.key)
        consumer = Consumer(
            key, MarketClient.open(url, IDENTITY, key), devnet.context(), devnet.url,
            deployment, JobStore(tmp_path / "consumer"), default_registry=guarded.host,
        )  # fmt: skip
        try:
            await daemon.start().logged("offer published")
            job_spec = parse_jobspec(spec(bare, "echo ran privately"))
            with pytest.raises(NeedsCredentials, match="refused user renter"):
                await consumer.quote(job_spec, logins=wrong)
            with pytest.raises(MarketRefused, match="is private"):
                await consumer.quote(job_spec)
            assert await consumer.market.my_jobs() == []  # nothing quoted, nothing locked

            (tmp_path / "job.yaml").write_text(yaml.safe_dump(spec(bare, "echo ran privately")))
            env = {**os.environ, "UNCHAINED_CONSUMER_MARKET_URL": url,
                   "UNCHAINED_CONSUMER_MARKET_IDENTITY": IDENTITY, "UNCHAINED_OGMIOS_URL":
                   devnet.url, "UNCHAINED_DEPLOYMENT": str(deployment_file),
                   "UNCHAINED_CONSUMER_KEY": str(tmp_path / "consumer.skey"),
                   "UNCHAINED_CONSUMER_STATE_DIR": str(tmp_path / "consumer"),
                   "UNCHAINED_DEFAULT_REGISTRY": guarded.host}  # fmt: skip
            code, submitted = run_json(env, "job", "submit", "job.yaml", "--yes",
                                       "--registry-auth", str(right), cwd=tmp_path)  # fmt: skip
            assert code == 0, submitted
            assert submitted["image"] == private and submitted["path"] == "escrow", submitted
            job = submitted["job_id"]
            assert await until_state(consumer, job, {"settled", "failed"}) == "settled"
            status = await consumer.status(job)
            assert status.exit_code == 0 and status.receipt_units and status.receipt_units > 0
            logs = "".join(line.text for line in await consumer.logs(job))
            assert "ran privately" in logs

            async with httpx.AsyncClient(base_url=url, timeout=30) as http:
                page = (await http.get(f"/explorer/jobs/{job}")).text
            answers = [page, status.model_dump_json(), (await consumer.market.my_jobs())[0]
                       .model_dump_json()]  # fmt: skip
        finally:
            daemon.stop()
            daemon.reap()
            await consumer.market.aclose()
    stored = b"".join(p.read_bytes() for p in settings.data_dir.rglob("*") if p.is_file())
    sealed = stored_account(settings.data_dir / "market.db", job)
    assert sealed and ACCOUNT.password not in sealed
    assert ACCOUNT.password.encode() not in stored
    assert base64.b64encode(f"{ACCOUNT.username}:{ACCOUNT.password}".encode()) not in stored
    assert ACCOUNT.password not in daemon.log_path.read_text()
    for answer in answers:
        assert ACCOUNT.password not in answer and sealed not in answer


def stored_account(database: Path, job: str) -> str | None:
    """The job's registry account as the market's database holds it."""
    import sqlite3

    with sqlite3.connect(database) as connection:
        row = connection.execute("SELECT registry_account FROM job WHERE id = ?", (job,)).fetchone()
    return row[0] if row else None
