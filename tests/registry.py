"""A real image registry for the tests: Debian's `docker-registry` (scripts/setup-docker.sh
installs it) on a free 127.0.0.1 port with a storage directory of its own, and the engine
pushing locally built images to it. Docker talks plain http to loopback registries, so no
certificate is needed. Its references are dropped from the engine after a push, so the image
is pulled back from the registry by digest when a test asks for it."""

from __future__ import annotations

import contextlib
import dataclasses
import http.server
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import httpx

from devnet.process import free_port

START_S = 20


@dataclasses.dataclass
class LocalRegistry:
    host: str  # 127.0.0.1:PORT
    process: subprocess.Popen[bytes]
    log: Path

    def push(
        self,
        client: docker.DockerClient,
        image: str,
        repository: str,
        auth: dict[str, str] | None = None,
    ) -> str:
        """Push the local `image` as `host/repository:TAG` (its local tag), as the account in
        `auth` (docker's auth_config) when the registry asks for one; its digest reference
        `host/repository@sha256:...`. The engine keeps neither reference: only the registry
        has the image under this name."""
        tag = image.rsplit(":", 1)[1] if ":" in image.rsplit("/", 1)[-1] else "latest"
        remote = f"{self.host}/{repository}"
        client.images.get(image).tag(remote, tag)
        digest = None
        for line in client.images.push(remote, tag=tag, stream=True, decode=True, auth_config=auth):
            assert "error" not in line, f"push of {remote}:{tag}: {line}"
            digest = line.get("aux", {}).get("Digest", digest)
        assert digest, f"push of {remote}:{tag} named no digest"
        pinned = f"{remote}@{digest}"
        forget(client, f"{remote}:{tag}", pinned)
        return pinned

    def stop(self) -> None:
        """Stop the registry and drop every reference the engine keeps to it (its port is
        not reused: stale names would pile up in the offers of later runs)."""
        client = docker.from_env()
        for image in client.images.list():
            names = (*image.tags, *(image.attrs.get("RepoDigests") or ()))
            forget(client, *(name for name in names if name.startswith(f"{self.host}/")))
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def forget(client: docker.DockerClient, *references: str) -> None:
    """Drop these references from the engine (the image stays under its other tags)."""
    for reference in references:
        with contextlib.suppress(docker.errors.ImageNotFound):
            client.images.remove(reference)


@contextlib.contextmanager
def local_registry(root: Path, auth: str = "") -> Iterator[LocalRegistry]:
    """`docker-registry serve` on a free port, storing under `root`, with the configuration's
    `auth` section (`tests.token_service.auth_config`; none: open to all); stopped at the end."""
    binary = shutil.which("docker-registry")
    if binary is None:
        raise RuntimeError("docker-registry is not installed: run scripts/setup-docker.sh")
    host = f"127.0.0.1:{free_port()}"
    config = root / "config.yml"
    config.write_text(
        "version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\n"
        f"storage:\n  filesystem:\n    rootdirectory: {root / 'storage'}\n"
        f"  delete:\n    enabled: true\nhttp:\n  addr: {host}\n{auth}"
    )
    log = root / "registry.log"
    with open(log, "ab") as out:
        process = subprocess.Popen([binary, "serve", str(config)], stdout=out, stderr=out)
    registry = LocalRegistry(host, process, log)
    try:
        deadline = time.monotonic() + START_S
        while not _answers(host):
            assert process.poll() is None, f"docker-registry exited:\n{log.read_text()}"
            assert time.monotonic() < deadline, f"registry silent:\n{log.read_text()}"
            time.sleep(0.05)
        yield registry
    finally:
        registry.stop()


def _answers(host: str) -> bool:
    try:
        return httpx.get(f"http://{host}/v2/", timeout=1).status_code in (200, 401)
    except httpx.HTTPError:
        return False


@contextlib.contextmanager
def swapping_proxy(upstream: str, swaps: dict[str, str]) -> Iterator[str]:
    """A registry in front of `upstream` that answers a request for manifest digest `a` with
    manifest `swaps[a]`'s bytes (a registry serving other bytes than the digest named); its
    host `127.0.0.1:PORT`."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def _forward(self) -> None:
            path = self.path
            for wanted, served in swaps.items():
                path = path.replace(f"/manifests/{wanted}", f"/manifests/{served}")
            headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
            answer = httpx.request(self.command, f"http://{upstream}{path}", headers=headers)
            self.send_response(answer.status_code)
            for name, value in answer.headers.items():
                if name.lower() not in ("transfer-encoding", "connection", "content-encoding"):
                    self.send_header(name, value)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(answer.content)

        do_GET = do_HEAD = _forward

        def log_message(self, *_: object) -> None:
            pass

    with serving(Handler) as port:
        yield f"127.0.0.1:{port}"


@contextlib.contextmanager
def serving(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[int]:
    """`handler` served on a free 127.0.0.1 port (threads); the port."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def another_image(client: docker.DockerClient, base: str, name: str) -> str:
    """A local image other than `base` (its CMD changed): `name:t`, for a registry to serve in
    its place."""
    holder = client.containers.create(base, ["true"])
    try:
        holder.commit(repository=name, tag="t", changes=['CMD ["true"]'])
    finally:
        holder.remove()
    return f"{name}:t"
