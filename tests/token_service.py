"""A registry token service for the tests (the real protocol, a small server of our own: the
registry's own project ships none): Debian's `docker-registry` is configured with
`auth: token:` to trust a self-signed certificate made here, and this HTTP server on a free
127.0.0.1 port issues JWTs signed with that certificate's key, as the distribution registry's
token specification asks (RS256; claims iss, sub, aud, exp, nbf, iat, jti and `access`; the
`kid` header is the key's libtrust id, by which the registry finds the key in its bundle).

Policy: anyone pulls from repositories outside `private/`; `private/...` is pulled, and
everything pushed, only by the user `ACCOUNT` with its password; other credentials are refused
with 401 (docker's and this project's clients then report them as wrong)."""

from __future__ import annotations

import base64
import binascii
import contextlib
import dataclasses
import datetime
import hashlib
import http.server
import json
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import docker
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.x509.oid import NameOID

from offchain.protocol.job.registry_auth import Credentials
from tests.registry import LocalRegistry, local_registry, serving

ISSUER = "unchained-test-issuer"
SERVICE = "unchained-test-registry"
ACCOUNT = Credentials("renter", "s3cret-registry-password")
PRIVATE = "private/"
TOKEN_S = 300


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def libtrust_key_id(public_key: rsa.RSAPublicKey) -> str:
    """The key id the registry's libtrust gives a key: the sha256 of its DER
    SubjectPublicKeyInfo, cut to 240 bits, base32 without padding, in groups of four by `:`."""
    der = public_key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    text = base64.b32encode(hashlib.sha256(der).digest()[:30]).decode().rstrip("=")
    return ":".join(text[start : start + 4] for start in range(0, len(text), 4))


@dataclasses.dataclass
class TokenService:
    url: str  # http://127.0.0.1:PORT/token: the registry's realm
    cert: Path  # the PEM bundle the registry trusts
    issued: list[dict[str, object]]  # every token's claims, for the tests to read


def make_key(folder: Path) -> tuple[rsa.RSAPrivateKey, Path]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, ISSUER)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    path = folder / "token-cert.pem"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return key, path


def allowed(user: str | None, repository: str, asked: list[str]) -> list[str]:
    """The actions of `asked` this policy grants `user` (None: anonymous) on `repository`."""
    if user == ACCOUNT.username:
        return asked
    return [] if repository.startswith(PRIVATE) else [a for a in asked if a == "pull"]


def signed_token(key: rsa.RSAPrivateKey, user: str | None, scopes: list[str]) -> dict[str, object]:
    access = []
    for scope in scopes:
        kind, _, rest = scope.partition(":")
        repository, _, actions = rest.rpartition(":")
        granted = allowed(user, repository, actions.split(","))
        access.append({"type": kind, "name": repository, "actions": granted})
    now = int(time.time())
    claims = {"iss": ISSUER, "sub": user or "", "aud": SERVICE, "exp": now + TOKEN_S,
              "nbf": now - 10, "iat": now, "jti": secrets.token_hex(8),
              "access": access}  # fmt: skip
    header = {"typ": "JWT", "alg": "RS256", "kid": libtrust_key_id(key.public_key())}
    signing = f"{b64url(json.dumps(header).encode())}.{b64url(json.dumps(claims).encode())}"
    signature = key.sign(signing.encode(), padding.PKCS1v15(), hashes.SHA256())
    return {"token": f"{signing}.{b64url(signature)}", "claims": claims}


def basic_user(header: str | None) -> str | bool | None:
    """The user of a Basic `header` whose password is right; None without one; False when
    the credentials are wrong."""
    if not header:
        return None
    scheme, _, encoded = header.partition(" ")
    try:
        user, _, password = base64.b64decode(encoded).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return False
    right = scheme.lower() == "basic" and (user, password) == (ACCOUNT.username, ACCOUNT.password)
    return user if right else False


@contextlib.contextmanager
def token_service(folder: Path) -> Iterator[TokenService]:
    """The token service on a free loopback port, with its key and certificate in `folder`."""
    key, cert = make_key(folder)
    issued: list[dict[str, object]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            query = parse_qs(urlsplit(self.path).query)
            user = basic_user(self.headers.get("Authorization"))
            if user is False or query.get("service") != [SERVICE]:
                self.send_response(401)
                self.end_headers()
                return
            made = signed_token(key, user, query.get("scope", []))
            issued.append(made["claims"])  # type: ignore[arg-type]
            body = json.dumps({"token": made["token"], "expires_in": TOKEN_S}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    with serving(Handler) as port:
        yield TokenService(f"http://127.0.0.1:{port}/token", cert, issued)


@dataclasses.dataclass
class GuardedRegistry:
    """A local registry that reads only the tokens `tokens` issues."""

    registry: LocalRegistry
    tokens: TokenService

    @property
    def host(self) -> str:
        return self.registry.host

    def push(self, client: docker.DockerClient, image: str, repository: str) -> str:
        """`LocalRegistry.push` as the test account (which may push anywhere)."""
        return self.registry.push(client, image, repository, account_config())


def account_config() -> dict[str, str]:
    """The test account as docker's auth_config."""
    return {"username": ACCOUNT.username, "password": ACCOUNT.password}


@contextlib.contextmanager
def guarded_registry(folder: Path) -> Iterator[GuardedRegistry]:
    """A token service, and a local registry behind it; both stopped at the end."""
    with token_service(folder) as tokens, local_registry(folder, auth_config(tokens)) as running:
        yield GuardedRegistry(running, tokens)


def auth_config(service: TokenService) -> str:
    """The registry configuration's `auth:` section that sends readers to `service`."""
    return (
        f"auth:\n  token:\n    realm: {service.url}\n    service: {SERVICE}\n"
        f"    issuer: {ISSUER}\n    rootcertbundle: {service.cert}\n"
    )
