"""The registry v2 API's bearer-token challenge, as docker answers it: a registry that wants a
token answers 401 with `WWW-Authenticate: Bearer realm=...,service=...,scope=...`; the client
asks the realm for a token for that service and scope (anonymously, or with the renter's user
and password as HTTP basic credentials) and retries with `Authorization: Bearer TOKEN`. Public
images on most registries need the anonymous token; private ones the renter's credentials.

Credentials go only to a realm over https, or to one on this machine beside a registry on this
machine (a local registry and its token service): never in clear over a network, and never to a
realm a remote registry names on the reader's own machine (it could make the reader probe its
own ports)."""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import re
from urllib.parse import urlsplit

import httpx

from offchain.core.errors import UnchainedError

CHALLENGE_FIELD = re.compile(r'(\w+)="([^"]*)"')
MAX_TOKEN_BYTES = 64 << 10  # a token answer is a JWT of a few KiB


class RegistryAuthError(UnchainedError):
    """A registry's token could not be had; the message says why."""


class CredentialsRefused(RegistryAuthError):
    """The token service refused the reader (wrong credentials, or none where some are due)."""


@dataclasses.dataclass(frozen=True)
class Credentials:
    """A renter's account at one registry (what `docker login` keeps); `repr` hides them."""

    username: str
    password: str = dataclasses.field(repr=False)


@dataclasses.dataclass(frozen=True)
class Challenge:
    """A registry's `WWW-Authenticate: Bearer ...` answer: where to ask for which token."""

    realm: str
    service: str | None
    scope: str | None

    @classmethod
    def parse(cls, header: str) -> Challenge | None:
        """The Bearer challenge in `header`, or None when it is not one (Basic, or none)."""
        scheme, _, rest = header.strip().partition(" ")
        if scheme.lower() != "bearer":
            return None
        fields = dict(CHALLENGE_FIELD.findall(rest))
        if not fields.get("realm"):
            return None
        return cls(fields["realm"], fields.get("service"), fields.get("scope"))


def request(
    http: httpx.Client,
    method: str,
    url: str,
    headers: dict[str, str],
    scope: str,
    credentials: Credentials | None = None,
) -> httpx.Response:
    """`method url`, answering a Bearer challenge once with a token for `scope` (the challenge's
    own scope when it names one); the registry's answer, whatever its status, streamed: the
    caller reads at most what it needs (`bounded`) and closes it."""
    answer = http.send(http.build_request(method, url, headers=headers), stream=True)
    if answer.status_code != 401:
        return answer
    answer.close()
    challenge = Challenge.parse(answer.headers.get("WWW-Authenticate", ""))
    if challenge is None:
        return answer
    token = fetch_token(http, url, challenge, scope, credentials)
    retry = http.build_request(method, url, headers={**headers, "Authorization": f"Bearer {token}"})
    return http.send(retry, stream=True)


def bounded(answer: httpx.Response, limit: int) -> bytes | None:
    """A streamed answer's body, or None when it is longer than `limit` bytes (a registry or
    token service cannot make the reader hold more)."""
    body = bytearray()
    for chunk in answer.iter_bytes():
        body += chunk
        if len(body) > limit:
            return None
    return bytes(body)


def fetch_token(
    http: httpx.Client,
    registry_url: str,
    challenge: Challenge,
    scope: str,
    credentials: Credentials | None,
) -> str:
    """The realm's token for `scope`; RegistryAuthError when the realm refuses (wrong
    credentials), is not one this reader may ask, or answers no token."""
    check_realm(registry_url, challenge.realm)
    params = {"scope": challenge.scope or scope}
    if challenge.service:
        params["service"] = challenge.service
    auth = (credentials.username, credentials.password) if credentials else None
    try:
        asked = http.build_request("GET", challenge.realm, params=params)
        answer = http.send(asked, auth=auth, stream=True)
        try:
            body = bounded(answer, MAX_TOKEN_BYTES) if answer.status_code == 200 else None
        finally:
            answer.close()
    except httpx.HTTPError as exc:
        raise RegistryAuthError(f"token service {challenge.realm} is unreachable: {exc}") from exc
    if answer.status_code in (401, 403):
        who = f"user {credentials.username}" if credentials else "an anonymous reader"
        raise CredentialsRefused(f"token service {challenge.realm} refused {who} (wrong "
                                f"credentials?) for {params['scope']}")  # fmt: skip
    if body is None:
        raise RegistryAuthError(
            f"token service {challenge.realm} answered HTTP {answer.status_code}, not a token"
        )
    try:
        fields = json.loads(body)
        token = fields.get("token") or fields.get("access_token")
    except (ValueError, AttributeError):
        token = None
    if not isinstance(token, str) or not token:
        raise RegistryAuthError(f"token service {challenge.realm} answered no token")
    return token


def is_loopback(host: str) -> bool:
    """localhost or 127.0.0.0/8 (with or without a port): a registry on this machine."""
    name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name.strip("[]")).is_loopback
    except ValueError:
        return False


def check_realm(registry_url: str, realm: str) -> None:
    """Refuse a realm that is not https, unless both it and the registry are on this machine."""
    registry, asked = urlsplit(registry_url), urlsplit(realm)
    local = is_loopback(registry.netloc)
    if asked.scheme not in ("http", "https") or not asked.netloc:
        raise RegistryAuthError(f"the registry names a token service that is no URL: {realm}")
    if is_loopback(asked.netloc) and not local:
        raise RegistryAuthError(
            f"registry {registry.netloc} names a token service on this machine ({realm})"
        )
    if asked.scheme != "https" and not (local and is_loopback(asked.netloc)):
        raise RegistryAuthError(f"registry {registry.netloc} names a token service over plain "
                                f"http ({realm}): credentials would travel in clear")  # fmt: skip
