"""`unchained endpoint deploy | call | list | logs | stop` end to end on the devnet: the market,
the provider's daemon (`provider run`) whose offer names its gateway and request price, and
its gateway (`provider gateway`), both real processes. The renter deploys the sample service
(the offer chosen and a channel opened by the CLI, admitted by the daemon on chain), calls it
three times, reads its logs, lists it and stops it; the daemon removes its container and
claims the channel. A deploy of a taken name is refused before any channel is funded. Amounts
to the lovelace: each call paid one price, the IOU acknowledged, the claim on chain, the
provider's balance (the claim's fee aside). Then, on the same set-up, `kind: llm` endpoints
called with the `openai` client (tests/consumer/llm_devnet.py), claimed the same way."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import types
from pathlib import Path

import docker
import httpx
import yaml

from consumer.sdk.channel_store import ChannelStore
from devnet.process import free_port
from offchain.protocol.ledger.amounts import ADA
from provider.money.channel_book import ChannelBook
from provider.rentals.book import RentalBook, qualified
from provider.rentals.services import LABEL_SERVICE
from samples import images as sample_images
from tests.consumer.cli import cli_env, funded_key, run, run_json
from tests.consumer.llm_devnet import INPUT, OUTPUT, llm_endpoints_on_devnet
from tests.protocol.onchain import balance
from tests.provider.daemon_harness import IDENTITY, daemon_on_market, quiet_market
from tests.provider.test_channels_daemon import claimed

PRICE = ADA  # per request: each claim output is well above the min-UTxO
CALLS = 3


def gateway_process(daemon, deployment_file: Path, devnet_url: str, port: int, log: Path):
    """`unchained provider gateway` on `port`, once it answers."""
    command = [sys.executable, "-m", "unchained.cli", "provider", "gateway", "--config",
               str(daemon.config), "--ogmios-url", devnet_url, "--deployment",
               str(deployment_file), "--listen", f"127.0.0.1:{port}"]  # fmt: skip
    with log.open("ab") as out:
        process = subprocess.Popen(command, stdout=out, stderr=out)
    deadline = time.monotonic() + 60
    while True:
        try:
            httpx.get(f"http://127.0.0.1:{port}/endpoints", timeout=2)
            return process
        except httpx.HTTPError:
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)


async def test_deploy_call_list_logs_and_stop_the_sample_service(devnet, tmp_path: Path):
    image = sample_images.sample_service_image(docker.from_env())
    deployment_file, deployment, settings = await quiet_market(devnet, tmp_path)
    port = free_port()
    gateway_url = f"http://127.0.0.1:{port}"
    async with daemon_on_market(
        devnet, tmp_path, deployment_file, settings, bundles=2, gateway_url=gateway_url,
        offer_lines=f"request_price = {PRICE}\ntoken_prices = [{INPUT}, {OUTPUT}]",
        channel_claim_interval_s=1,
    ) as (daemon, provider, market_url):  # fmt: skip
        gateway = gateway_process(daemon, deployment_file, devnet.url, port, tmp_path / "gw.log")
        try:
            market = types.SimpleNamespace(url=market_url, deployment_path=deployment_file)
            before = balance(devnet, provider.address)
            renter, key = await funded_key(devnet, tmp_path, 100 * ADA)
            env = cli_env(market, devnet, key, tmp_path / "state", identity=IDENTITY)
            spec = {"kind": "service", "image": image, "port": sample_images.SAMPLE_SERVICE_PORT,
                    "price_per_request": PRICE,
                    "resources": {"cpu_cores": 1, "memory_mib": 256}}  # fmt: skip
            (tmp_path / "svc.yaml").write_text(yaml.safe_dump(spec))

            code, deployed = run_json(env, "endpoint", "deploy", "svc.yaml", "--deposit", "10",
                                      "--name", "sample", cwd=tmp_path)  # fmt: skip
            assert code == 0 and deployed["state"] == "running", (deployed, daemon.log())
            assert deployed["gateway_url"] == gateway_url
            assert (
                deployed["provider_id"] == provider.key.to_verification_key().hash().payload.hex()
            )
            channel = deployed["channel"]
            for n in range(1, CALLS + 1):
                code, called = run_json(env, "endpoint", "call", "sample", "--data",
                                        json.dumps({"values": [n, 1]}), cwd=tmp_path)  # fmt: skip
                assert code == 0, called
                assert called["answer"]["score"] == 2 * (n + 1) + 1
                assert (called["paid"], called["total"]) == (PRICE, n * PRICE)
            logs = run(env, "endpoint", "logs", "sample", cwd=tmp_path)
            assert logs.returncode == 0 and logs.stdout.count("POST /predict") == CALLS, logs
            code, listed = run_json(env, "endpoint", "list", cwd=tmp_path)
            assert code == 0 and len(listed) == 1, listed
            shown = listed[0]
            assert (shown["state"], shown["requests"], shown["served"], shown["due"]) == (
                "running", CALLS, CALLS * PRICE, CALLS * PRICE)  # fmt: skip

            code, stopped = run_json(env, "endpoint", "stop", "sample", cwd=tmp_path)
            assert code == 0 and stopped["state"] == "stopped", stopped
            assert stopped["paid"] == CALLS * PRICE  # nothing per second: the requests alone
            assert ChannelStore(tmp_path / "state").signed(channel) == CALLS * PRICE

            # the name taken: refused before a channel is opened or funded, to the lovelace
            wallet_before = balance(devnet, renter.address)
            again = run(env, "endpoint", "deploy", "svc.yaml", "--deposit", "1000", "--name",
                        "sample", cwd=tmp_path)  # fmt: skip
            taken = "you have a deployment named sample on this gateway already"
            assert again.returncode != 0 and taken in again.stderr, again
            assert balance(devnet, renter.address) == wallet_before
            assert [c.channel_id for c in ChannelStore(tmp_path / "state").all()] == [channel]

            client = docker.from_env()
            deadline = time.monotonic() + 30
            sample = qualified(renter.vkey, "sample")  # the book's name: names are per renter
            while client.containers.list(all=True, filters={"label": f"{LABEL_SERVICE}={sample}"}):
                assert time.monotonic() < deadline, daemon.log()
                time.sleep(0.2)
            book = ChannelBook.in_state_dir(daemon.state_dir, deployment.network_id,
                                            deployment.channel_hash, credit=0)  # fmt: skip
            entry = book.get(bytes.fromhex(channel))
            assert entry is not None and entry.iou is not None
            assert entry.iou.amount == CALLS * PRICE
            await claimed(book, bytes.fromhex(channel), CALLS * PRICE)
            fees = [
                int(f) for f in re.findall(r"claiming 1 channel\(s\).* fee (\d+)", daemon.log())
            ]
            assert fees and balance(devnet, provider.address) - before == CALLS * PRICE - sum(fees)
            row = RentalBook.in_state_dir(daemon.state_dir).get(sample)
            assert row is not None and (row.requests, row.served) == (CALLS, CALLS * PRICE)
            assert row.image_digest == client.images.get(image).id

            llm_channel, llm_paid = llm_endpoints_on_devnet(env, tmp_path, daemon)
            await claimed(book, bytes.fromhex(llm_channel), llm_paid)
            fees = [
                int(f) for f in re.findall(r"claiming 1 channel\(s\).* fee (\d+)", daemon.log())
            ]
            assert balance(devnet, provider.address) - before == (
                CALLS * PRICE + llm_paid - sum(fees))  # fmt: skip
        finally:
            gateway.terminate()
            gateway.wait(30)
