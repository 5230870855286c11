"""Images from a real registry (Debian's docker-registry on a free local port): a tag resolves to
the digest the push made, the provider pulls by digest and runs the job, records the digest in
its metering and lists it in its offer; a registry serving other bytes is refused before
anything runs, and the registry's failures are named."""

from __future__ import annotations

import contextlib
import http.server
import threading
from collections.abc import Iterator

import pytest

from consumer.sdk.errors import QuoteRejected
from consumer.sdk.quote import locked_spec
from devnet.process import free_port
from offchain.market.errors import Conflict
from offchain.market.schemas import JobRequest
from offchain.market.services import image_pins
from offchain.market.settings import MarketSettings
from offchain.protocol.job.offer import ImageSupply
from offchain.protocol.job.registry import ImageName, RegistryError, is_loopback, pinned, resolve
from provider.config import RunnerSettings
from provider.images.recipes import BUSYBOX_REPOSITORY, local_images
from provider.sandbox.runner import Runner
from provider.selftest.checks import job, log_text
from tests.provider.conftest import assert_no_leftovers
from tests.registry import another_image, forget, swapping_proxy


def test_a_tag_resolves_to_the_digest_its_push_made(registry, registry_busybox, busybox):
    tag = busybox.rsplit(":", 1)[1]
    assert resolve(f"{registry.host}/{BUSYBOX_REPOSITORY}:{tag}") == registry_busybox
    assert resolve(registry_busybox) == registry_busybox  # a digest the registry holds
    assert pinned(f"{registry.host}/{BUSYBOX_REPOSITORY}:{tag}") == registry_busybox
    assert pinned("unchained/python-numpy:latest") == "unchained/python-numpy:latest"


def test_the_registry_s_failures_are_named(registry, registry_busybox):
    with pytest.raises(RegistryError, match="has no tag nope of unchained/busybox"):
        resolve(f"{registry.host}/{BUSYBOX_REPOSITORY}:nope")
    absent = registry_busybox[:-8] + "00000000"
    with pytest.raises(RegistryError, match=f"has no digest {absent.split('@')[1]}"):
        resolve(absent)
    with pytest.raises(RegistryError, match="is unreachable"):
        resolve(f"127.0.0.1:{free_port()}/{BUSYBOX_REPOSITORY}:latest", timeout_s=2)
    with plain_web_server() as host, pytest.raises(RegistryError, match="did not answer as a reg"):
        resolve(f"{host}/{BUSYBOX_REPOSITORY}:latest")
    with pytest.raises(RegistryError, match="names no registry host"):
        resolve("unchained/busybox:latest")


def test_references_are_read_as_docker_reads_them():
    name = ImageName.parse("127.0.0.1:5000/a/b:1.0@sha256:" + "ab" * 32)
    assert (name.host, name.repository, name.tag) == ("127.0.0.1:5000", "a/b", "1.0")
    assert name.manifest_url() == "http://127.0.0.1:5000/v2/a/b/manifests/sha256:" + "ab" * 32
    assert ImageName.parse("registry.example/a:t").manifest_url().startswith("https://")
    assert ImageName.parse("unchained/busybox:t").host is None
    assert ImageName.parse("localhost/busybox").repository == "busybox"
    assert is_loopback("localhost:5000") and is_loopback("127.0.0.2") and not is_loopback("a.b")


def test_a_job_named_by_digest_is_pulled_run_and_listed(client, tmp_path, registry_busybox):
    """Not in the engine under that digest: the runner pulls it, runs it, and the metering
    record names the digest; the engine keeps it, so the offer lists it and a spec naming it
    matches without another pull."""
    forget(client, registry_busybox)
    runner = Runner(client, RunnerSettings(state_dir=tmp_path / "state", pull_images=True))
    result = runner.run("by_digest", job(registry_busybox, ["echo", "from the registry"]))
    assert result.status == "succeeded", result.error
    assert "from the registry" in log_text(result)
    assert result.record is not None and result.record.image_digest == registry_busybox
    listed = local_images(client)
    assert registry_busybox in {image.reference for image in listed}
    assert ImageSupply.of(listed).runs(registry_busybox)
    assert_no_leftovers(runner)


def test_a_registry_serving_other_bytes_than_the_digest_is_refused_before_running(
    client, tmp_path, registry, registry_busybox, busybox
):
    """A registry that answers digest A with image B's manifest: the pull fails, nothing runs."""
    local = another_image(client, busybox, "unchained/other")
    other = registry.push(client, local, "unchained/other")
    forget(client, local)
    named, served = registry_busybox.split("@")[1], other.split("@")[1]
    runner = Runner(client, RunnerSettings(state_dir=tmp_path / "state", pull_images=True))
    with swapping_proxy(registry.host, {named: served}) as host:
        lying = f"{host}/{BUSYBOX_REPOSITORY}@{named}"
        result = runner.run("lied_to", job(lying, ["echo", "never"]))
    assert result.status == "error" and result.record is None
    assert "could not be pulled" in (result.error or ""), result.error
    assert lying not in {image.reference for image in local_images(client)}
    assert_no_leftovers(runner)


@contextlib.contextmanager
def plain_web_server() -> Iterator[str]:
    """A web server that is no registry: 200 and HTML for every path."""

    class Page(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()

        def do_GET(self) -> None:
            self.do_HEAD()
            self.wfile.write(b"<html>hello</html>")

        def log_message(self, *_: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_the_renter_checks_the_market_s_pin_with_the_registry(registry, registry_busybox, busybox):
    """The renter's SDK takes a pinned image only when the registry, asked by the renter,
    names the same digest: a market pinning another image gets nothing locked."""
    tag = f"{registry.host}/{BUSYBOX_REPOSITORY}:{busybox.rsplit(':', 1)[1]}"
    asked = job(tag, ["true"])
    locked = locked_spec(asked, registry_busybox)
    assert locked.image == registry_busybox and locked.job_id() != asked.job_id()
    assert locked_spec(asked, None) is asked  # a market that pins nothing
    other = registry_busybox[:-8] + "00000000"
    with pytest.raises(QuoteRejected, match="but the registry names"):
        locked_spec(asked, other)
    local = job("unchained/busybox:latest", ["true"])
    with pytest.raises(QuoteRejected, match="not the unchained/busybox:latest asked"):
        locked_spec(local, registry_busybox)


def test_a_market_reads_no_registry_on_its_own_machine_unless_told(registry, registry_busybox):
    """A renter could otherwise make the market probe its own ports; a bare local tag is
    quoted as written."""
    asked = job(f"{registry.host}/{BUSYBOX_REPOSITORY}:nope", ["true"])
    request = JobRequest.model_construct(spec=asked)  # only its spec is read
    with pytest.raises(Conflict, match="reads no registry on its own machine"):
        image_pins.pinned(MarketSettings(), request)
    with pytest.raises(Conflict, match=r"cannot be pinned to a digest: .*has no tag nope"):
        image_pins.pinned(MarketSettings(local_registries=True), request)
    local = JobRequest.model_construct(spec=job("unchained/busybox:latest", ["true"]))
    assert image_pins.pinned(MarketSettings(), local) is local
