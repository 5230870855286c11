"""The gateway end to end: a real service in a docker container (busybox's httpd, in the image
built locally) behind it, a real channel opened on the session's devnet and admitted to the
provider's book; requests paid by the renter's IOUs through the gateway are served, and the
claim schedule then claims what they paid, to the lovelace."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import docker
import httpx
import pytest

from devnet.process import DevnetProcess
from offchain.chain.submit import tip_point
from offchain.protocol.ledger.iou import IOU_HEADER
from offchain.protocol.tx.deployment import Deployment
from provider.daemon.channel_claims import ChannelClaimer
from provider.gateway.app import gateway_app
from provider.money.channel_book import ChannelBook
from provider.rentals.book import RentalBook
from tests.protocol.channels import iou
from tests.protocol.onchain import balance, tx_fee, wallet
from tests.provider.test_channels_claims import SETTINGS, chain_of, opened
from tests.provider.test_gateway_support import running, serving, stored

PRICE = 250_000  # lovelace a request
REQUESTS = 12
PAGE = b"served from a container\n"


@pytest.fixture
def service(client: docker.DockerClient, busybox: str) -> Iterator[str]:
    """busybox httpd serving PAGE as /index.html, published on 127.0.0.1 only: its URL."""
    script = f"mkdir /www && printf '{PAGE.decode().strip()}\\n' > /www/index.html && " \
             "exec httpd -f -p 8080 -h /www"  # fmt: skip
    container = client.containers.run(busybox, ["sh", "-c", script], detach=True,
                                      ports={"8080/tcp": ("127.0.0.1", None)})  # fmt: skip
    try:
        container.reload()
        port = container.ports["8080/tcp"][0]["HostPort"]
        url = f"http://127.0.0.1:{port}"
        while True:  # until httpd listens (the test's timeout bounds the wait)
            try:
                if httpx.get(f"{url}/index.html").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.05)
        yield url
    finally:
        container.remove(force=True)


async def test_requests_paid_by_ious_through_the_gateway_are_claimed_to_the_lovelace(
    devnet: DevnetProcess, deployment: Deployment, service: str, tmp_path: Path
) -> None:
    provider = await wallet(devnet)
    book = ChannelBook(tmp_path / "channels.sqlite", deployment.network_id,
                       deployment.channel_hash, credit=0)  # fmt: skip
    renter, channel, _ = await opened(devnet, deployment, provider, book)
    endpoints = RentalBook(tmp_path / "endpoints.sqlite")
    endpoints.add(running("web", service, PRICE, channel=channel.id))

    with serving(gateway_app(book, endpoints)) as url, httpx.Client(base_url=url) as gateway:
        unpaid = gateway.get("/endpoints/web/index.html")
        assert unpaid.status_code == 402 and unpaid.json()["due"] == PRICE
        for n in range(1, REQUESTS + 1):
            signed = iou(deployment, renter, channel, n * PRICE)
            response = gateway.get("/endpoints/web/index.html",
                                   headers={IOU_HEADER: signed.to_header()})  # fmt: skip
            assert response.status_code == 200 and response.content == PAGE
        stale = iou(deployment, renter, channel, REQUESTS * PRICE)  # the last one again
        refused = gateway.get("/endpoints/web/index.html", headers={IOU_HEADER: stale.to_header()})
        assert refused.json()["due"] == (REQUESTS + 1) * PRICE

    served = endpoints.get(stored("web"))
    assert served is not None and (served.requests, served.served) == (REQUESTS, REQUESTS * PRICE)
    before = balance(devnet, provider.address)
    since = await tip_point(devnet.url)

    await ChannelClaimer(chain_of(devnet, deployment, provider), book, SETTINGS).tick()

    entry = book.get(channel.id)
    assert entry is not None and entry.view.claimed == REQUESTS * PRICE and entry.unclaimed == 0
    fee = await tx_fee(devnet, entry.view.utxo.split("#")[0], since)
    assert balance(devnet, provider.address) - before == REQUESTS * PRICE - fee
