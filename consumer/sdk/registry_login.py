"""A renter's registry accounts, read from a file in docker's own format (`~/.docker/config.json`
as `docker login` writes it: `{"auths": {"HOST": {"auth": base64("user:password")}}}`, or
`username`/`password` fields), and what the renter does with one for a private image: pin its
tag itself (the market holds no account, so cannot), then seal the account to the quoted
provider's key for the market to carry (`offchain.protocol.job.registry_seal`). Credential
helpers (`credsStore`) are not read: a file made for this names the account in full."""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
from pathlib import Path

from consumer.sdk.errors import ConsumerError
from offchain.protocol.job.registry import located, registry_host, resolve
from offchain.protocol.job.registry_auth import Credentials
from offchain.protocol.job.registry_seal import seal


@dataclasses.dataclass(frozen=True)
class RegistryLogins:
    """The accounts of a docker config file, by registry host[:port]."""

    accounts: dict[str, Credentials] = dataclasses.field(repr=False)

    @classmethod
    def read(cls, path: Path) -> RegistryLogins:
        """The accounts in `path`; ConsumerError naming the file and what is wrong with it."""
        try:
            auths = json.loads(path.read_text()).get("auths", {})
            return cls({registry_host(host): account(entry) for host, entry in auths.items()})
        except (OSError, ValueError, AttributeError, KeyError, binascii.Error) as exc:
            raise ConsumerError(f"{path} is not a docker config file with `auths`: {exc}") from exc

    def for_image(self, image: str, default_registry: str | None) -> tuple[str, Credentials] | None:
        """The registry host of `image` and the account for it, or None when there is none."""
        host = located(image, default_registry).host
        assert host is not None  # located names one or raises
        found = self.accounts.get(host)
        return None if found is None else (host, found)


def account(entry: dict[str, str]) -> Credentials:
    """One `auths` entry's account: its `auth` (base64 `user:password`), else its fields."""
    if entry.get("auth"):
        user, sep, password = base64.b64decode(entry["auth"], validate=True).decode().partition(":")
        if not sep:
            raise ValueError("an `auth` that is not base64 of user:password")
        return Credentials(user, password)
    return Credentials(entry["username"], entry["password"])


@dataclasses.dataclass(frozen=True)
class PrivateImage:
    """A private image pinned by its renter, and the account the provider will pull it with."""

    image: str  # host/repo@sha256:...
    registry: str
    credentials: Credentials

    @classmethod
    def pin(
        cls, image: str, logins: RegistryLogins, default_registry: str | None
    ) -> PrivateImage | None:
        """`image` pinned with the renter's account for its registry (RegistryError when the
        registry refuses it: nothing is quoted or locked), or None when there is no account
        for that registry (the image is then read as a public one)."""
        found = logins.for_image(image, default_registry)
        if found is None:
            return None
        host, credentials = found
        return cls(resolve(image, default_registry=host, credentials=credentials), host,
                   credentials)  # fmt: skip

    def sealed(self, provider_vkey: bytes) -> str:
        """The account sealed to the quoted provider's key: what the market carries."""
        return seal(self.registry, self.credentials, provider_vkey)
