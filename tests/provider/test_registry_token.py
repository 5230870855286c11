"""Images behind a registry's bearer-token challenge (Debian's docker-registry with `auth:
token:`, trusting the test's own token service): public repositories read anonymously, a
private one only with the renter's account, wrong credentials named as such, bare names read
in the default registry as docker reads them, a registry contradicting the digest refused, and
the provider pulling a private image with the renter's sealed account and nothing else."""

from __future__ import annotations

import docker
import nacl.signing
import pytest

from devnet.process import free_port
from offchain.market.errors import Conflict
from offchain.market.schemas import JobRequest
from offchain.market.services import image_pins
from offchain.market.settings import MarketSettings
from offchain.protocol.job import registry
from offchain.protocol.job.registry import (
    Credentials,
    NeedsCredentials,
    RegistryError,
    default_host,
    familiar,
    located,
    pinned,
    qualified,
    registry_host,
    resolve,
)
from offchain.protocol.job.registry_auth import Challenge, RegistryAuthError, check_realm
from offchain.protocol.job.registry_seal import SealError, for_image, seal, unseal
from provider.config import RunnerSettings
from provider.images.recipes import has_digest, local_images
from provider.sandbox.runner import Runner
from provider.selftest.checks import job, log_text
from tests.provider.conftest import assert_no_leftovers
from tests.registry import another_image, forget, local_registry, swapping_proxy
from tests.token_service import ACCOUNT, GuardedRegistry, TokenService, auth_config


@pytest.fixture(scope="module")
def tag(busybox: str) -> str:
    return busybox.rsplit(":", 1)[1]


@pytest.fixture(scope="module")
def public(client, busybox: str, guarded: GuardedRegistry) -> str:
    return guarded.push(client, busybox, "public/busybox")


@pytest.fixture(scope="module")
def private(client, busybox: str, guarded: GuardedRegistry) -> str:
    return guarded.push(client, busybox, "private/busybox")


@pytest.fixture(scope="module")
def official(client, busybox: str, guarded: GuardedRegistry) -> str:
    """busybox as a one-part name's image: `library/bbx:latest` in the registry."""
    client.images.get(busybox).tag("unchained-test/bbx", "latest")
    try:
        return guarded.push(client, "unchained-test/bbx:latest", "library/bbx")
    finally:
        forget(client, "unchained-test/bbx:latest")


def test_a_public_tag_resolves_with_an_anonymous_token(guarded, public, tag):
    assert resolve(f"{guarded.host}/public/busybox:{tag}") == public
    assert resolve(public) == public
    last = guarded.tokens.issued[-1]
    assert last["sub"] == "" and last["access"] == [
        {"type": "repository", "name": "public/busybox", "actions": ["pull"]}
    ]


def test_a_private_tag_needs_the_renter_s_account(guarded, private, tag):
    reference = f"{guarded.host}/private/busybox:{tag}"
    with pytest.raises(NeedsCredentials, match="asks for credentials to read private/busybox"):
        resolve(reference)
    assert resolve(reference, credentials=ACCOUNT) == private
    assert resolve(private, credentials=ACCOUNT) == private
    wrong = Credentials(ACCOUNT.username, "not-the-password")
    with pytest.raises(NeedsCredentials, match="refused user renter \\(wrong credentials"):
        resolve(reference, credentials=wrong)
    assert "not-the-password" not in repr(wrong)


def test_bare_names_are_read_in_the_default_registry_as_docker_reads_them(
    guarded, official, public, tag
):
    host = guarded.host
    assert resolve("bbx", default_registry=host) == official
    assert official.startswith(f"{host}/library/bbx@sha256:")
    assert resolve("bbx:latest", default_registry=f"http://{host}/v1/") == official
    assert resolve(f"public/busybox:{tag}", default_registry=host) == public
    assert pinned(f"public/busybox:{tag}", default_registry=host) == public
    # not in the default registry: a provider's own image, quoted as written
    assert pinned("unchained/python-numpy:latest", default_registry=host) == (
        "unchained/python-numpy:latest"
    )
    assert pinned("bbx") == "bbx"  # no default registry: as written
    with pytest.raises(RegistryError, match="no default registry is set: set default_registry"):
        resolve("bbx")


def test_the_engine_s_default_registry_is_read_from_the_engine():
    address = docker.from_env().info()["IndexServerAddress"]
    host = default_host(registry.ENGINE)
    assert host == registry_host(address) and host and "/" not in host
    assert default_host("") is None
    canonical = located("registry.example/library/python:3", "https://index.registry.example/v1/")
    assert canonical.host == "index.registry.example" and canonical.repository == "library/python"
    assert located("other.example/a/b:1", "index.registry.example").host == "other.example"
    assert registry_host("https://registry.example:5000/v1/") == "registry.example:5000"


def test_a_pull_from_the_engine_s_default_registry_is_checked_as_docker_lists_it():
    """docker lists such an image without its registry's host (`python@sha256:...`)."""
    digest = "sha256:" + "ab" * 32
    attrs = {"RepoDigests": [f"python@{digest}", f"team/model@{digest}"]}
    default = "index.registry.example"
    assert has_digest(attrs, f"{default}/library/python@{digest}", default)
    assert has_digest(attrs, f"{default}/team/model@{digest}", default)
    assert not has_digest(attrs, f"{default}/library/python@{digest}", None)
    assert not has_digest(attrs, f"other.example/library/python@{digest}", default)
    assert familiar(f"{default}/library/python:3", default) == "python:3"
    # and an offer lists such a digest also as a market pins it
    assert qualified(f"python@{digest}", default) == f"{default}/library/python@{digest}"
    assert qualified(f"team/model@{digest}", default) == f"{default}/team/model@{digest}"
    assert qualified(f"127.0.0.1:5000/a@{digest}", default) is None
    assert qualified("python:3", default) is None


def test_a_registry_that_contradicts_the_digest_is_refused(client, busybox, guarded, public):
    """Asked for digest A, the registry serves image B's manifest (B's bytes, B's header)."""
    local = another_image(client, busybox, "unchained/other-token")
    other = guarded.push(client, local, "public/busybox")
    forget(client, local)
    named, served = public.split("@")[1], other.split("@")[1]
    refused = pytest.raises(RegistryError, match=f"serves {served} for .*not the image named")
    with swapping_proxy(guarded.host, {named: served}) as host, refused:
        resolve(f"{host}/public/busybox@{named}")


def test_the_challenge_and_the_realm_are_checked():
    found = Challenge.parse('Bearer realm="https://auth.example/token",service="s",scope="x"')
    assert found == Challenge("https://auth.example/token", "s", "x")
    assert Challenge.parse('Basic realm="x"') is None
    check_realm("https://registry.example/v2/", "https://auth.example/token")
    check_realm("http://127.0.0.1:5000/v2/", "http://127.0.0.1:5001/token")
    with pytest.raises(RegistryAuthError, match="on this machine"):
        check_realm("https://registry.example/v2/", "http://127.0.0.1:5001/token")
    with pytest.raises(RegistryAuthError, match="plain http"):
        check_realm("https://registry.example/v2/", "http://auth.example/token")


def test_an_account_sealed_to_a_provider_opens_only_with_its_key():
    provider, other = nacl.signing.SigningKey.generate(), nacl.signing.SigningKey.generate()
    sealed = seal("127.0.0.1:5000", ACCOUNT, bytes(provider.verify_key))
    assert ACCOUNT.password not in sealed and ACCOUNT.username not in sealed
    assert unseal(sealed, bytes(provider)) == ("127.0.0.1:5000", ACCOUNT)
    with pytest.raises(SealError):
        unseal(sealed, bytes(other))
    with pytest.raises(SealError):
        unseal("not base64!", bytes(provider))
    assert for_image("127.0.0.1:5000", "127.0.0.1:5000", ACCOUNT) == {
        "username": ACCOUNT.username, "password": ACCOUNT.password,
    }  # fmt: skip
    assert for_image("127.0.0.1:5001", "127.0.0.1:5000", ACCOUNT) is None


def test_the_provider_pulls_a_private_image_with_the_renter_s_account(client, tmp_path, private):
    """Without the account the pull is refused and nothing runs; with it (unsealed by the
    provider) the job pulls, runs and is listed by its digest."""
    forget(client, private)
    runner = Runner(client, RunnerSettings(state_dir=tmp_path / "state", pull_images=True))
    refused = runner.run("no_account", job(private, ["echo", "never"]))
    assert refused.status == "error" and "could not be pulled" in (refused.error or "")
    key = nacl.signing.SigningKey.generate()
    host, account = unseal(seal(private.split("/")[0], ACCOUNT, bytes(key.verify_key)), bytes(key))
    auth = for_image(private.split("/")[0], host, account)
    result = runner.run("with_account", job(private, ["echo", "private"]), pull_auth=auth)
    assert result.status == "succeeded", result.error
    assert "private" in log_text(result)
    assert private in {image.reference for image in local_images(client)}
    forget(client, private)
    assert_no_leftovers(runner)


def test_the_market_pins_bare_names_and_leaves_private_digests_as_written(
    guarded, public, private, tag
):
    settings = MarketSettings(local_registries=True, default_registry=guarded.host)

    def quoted(image: str, market: MarketSettings = settings) -> str:
        request = JobRequest.model_construct(spec=job(image, ["true"]))  # only its spec is read
        return image_pins.pinned(market, request).spec.image

    assert quoted(f"public/busybox:{tag}") == public
    assert quoted("unchained/python-numpy:latest") == "unchained/python-numpy:latest"
    assert quoted(f"public/busybox:{tag}", MarketSettings()) == f"public/busybox:{tag}"
    assert quoted(private) == private  # its renter pinned it; the market holds no account
    with pytest.raises(Conflict, match=r"is private .*pin it to its digest with your registry"):
        quoted(f"private/busybox:{tag}")
    with pytest.raises(Conflict, match="reads no registry on its own machine"):
        quoted(f"public/busybox:{tag}", MarketSettings(default_registry=guarded.host))


def test_a_token_service_that_does_not_answer_is_named_not_taken_for_a_private_image(
    tmp_path, guarded
):
    silent = TokenService(f"http://127.0.0.1:{free_port()}/token", guarded.tokens.cert, [])
    unreachable = pytest.raises(RegistryError, match=r"token service .* is unreachable")
    with local_registry(tmp_path, auth_config(silent)) as behind, unreachable as raised:
        resolve(f"{behind.host}/public/busybox:latest")
    assert not isinstance(raised.value, NeedsCredentials)
