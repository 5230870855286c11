"""An endpoint on two providers (`providers: 2`) end to end on the devnet: two real daemons and
their gateways on one market. `endpoint deploy` runs it on both, each paid over a channel of
its own; a call goes to the first; with that gateway killed, the next call is answered by the
other provider and paid on its channel alone; with it back, calls go to it again. `endpoint
stop` stops both. What each channel's IOUs signed, to the lovelace: one price per answer, on
the channel of the provider that answered."""

from __future__ import annotations

import json
import types
from pathlib import Path

import docker
import yaml

from consumer.sdk.channel_store import ChannelStore
from devnet.process import free_port
from offchain.protocol.ledger.amounts import ADA
from samples import images as sample_images
from tests.consumer.cli import cli_env, funded_key, run_json
from tests.consumer.test_endpoint_deploy import PRICE, gateway_process
from tests.market.client import serve
from tests.provider.daemon_harness import IDENTITY, new_provider, quiet_market


async def test_an_endpoint_on_two_providers_is_called_on_one_that_answers(devnet, tmp_path: Path):
    image = sample_images.sample_service_image(docker.from_env())
    deployment_file, _, settings = await quiet_market(devnet, tmp_path)
    with serve(settings) as market_url:
        daemons, ports, gateways = [], [], {}
        try:
            for n in (1, 2):
                home, port = tmp_path / f"provider{n}", free_port()
                home.mkdir()
                daemon, _ = await new_provider(
                    devnet, home, deployment_file, market_url, bundles=2,
                    gateway_url=f"http://127.0.0.1:{port}", offer_lines=f"request_price = {PRICE}",
                )  # fmt: skip
                daemons.append(daemon)
                ports.append(port)
                await daemon.start().logged("offer published")
            for daemon, port in zip(daemons, ports, strict=True):
                url = f"http://127.0.0.1:{port}"
                gateways[url] = gateway_process(daemon, deployment_file, devnet.url, port,
                                                daemon.log_path.parent / "gw.log")  # fmt: skip

            market = types.SimpleNamespace(url=market_url, deployment_path=deployment_file)
            _, key = await funded_key(devnet, tmp_path, 100 * ADA)
            env = cli_env(market, devnet, key, tmp_path / "state", identity=IDENTITY)
            spec = {"kind": "service", "image": image, "port": sample_images.SAMPLE_SERVICE_PORT,
                    "price_per_request": PRICE, "providers": 2,
                    "resources": {"cpu_cores": 1, "memory_mib": 256}}  # fmt: skip
            (tmp_path / "svc.yaml").write_text(yaml.safe_dump(spec))
            code, deployed = run_json(env, "endpoint", "deploy", "svc.yaml", "--deposit", "10",
                                      "--name", "twice", cwd=tmp_path)  # fmt: skip
            assert code == 0, deployed
            placed = deployed["providers"]
            assert [p["state"] for p in placed] == ["running", "running"], placed
            assert len({p["provider_id"] for p in placed}) == 2
            assert {p["gateway_url"] for p in placed} == set(gateways)
            first, second = placed
            channels = ChannelStore(tmp_path / "state")

            def call(n: int) -> dict:
                code, called = run_json(env, "endpoint", "call", "twice", "--data",
                                        json.dumps({"values": [n, 1]}), cwd=tmp_path)  # fmt: skip
                assert code == 0, called
                assert called["answer"]["score"] == 2 * (n + 1) + 1 and called["paid"] == PRICE
                return called

            assert call(1)["gateway_url"] == first["gateway_url"]
            gateways[first["gateway_url"]].terminate()  # the first provider's gateway is gone
            gateways[first["gateway_url"]].wait(30)
            answered = call(2)
            assert (answered["gateway_url"], answered["channel"]) == (
                second["gateway_url"], second["channel"])  # fmt: skip
            assert (channels.signed(first["channel"]), channels.signed(second["channel"])) == (
                PRICE, PRICE)  # fmt: skip

            index = [f"http://127.0.0.1:{p}" for p in ports].index(first["gateway_url"])
            gateways[first["gateway_url"]] = gateway_process(
                daemons[index], deployment_file, devnet.url, ports[index],
                daemons[index].log_path.parent / "gw-again.log",
            )  # fmt: skip
            assert call(3)["gateway_url"] == first["gateway_url"]  # back to the first
            code, stopped = run_json(env, "endpoint", "stop", "twice", cwd=tmp_path)
            assert code == 0 and [s["state"] for s in stopped["providers"]] == [
                "stopped", "stopped"], stopped  # fmt: skip
            assert [s["paid"] for s in stopped["providers"]] == [2 * PRICE, PRICE]
            assert (channels.signed(first["channel"]), channels.signed(second["channel"])) == (
                2 * PRICE, PRICE)  # fmt: skip
        finally:
            for gateway in gateways.values():
                gateway.terminate()
                gateway.wait(30)
            for daemon in daemons:
                daemon.stop()
                assert daemon.reap() == {"containers": [], "workspaces": [], "cgroups": []}
