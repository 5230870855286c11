"""The job spec: what a consumer asks a provider to run, one validated model for every party.

The consumer writes it (YAML), the market matches it against offers, the provider runs exactly
it. A spec is a batch job unless it says `kind: service`: a long-running server the provider
keeps up behind its gateway, paid per request and/or per second (`ServiceSpec`). Money is
integer lovelace and time integer seconds; sizes are integer MiB. Unknown fields are refused so
a typo (`gpu: 1`) never silently becomes "no GPU".

The escrow's `job_id` is `JobSpec.job_id()`: sha256 of the spec's canonical JSON, so the
consumer, the market and the provider agree on one job without trusting each other's bytes. A
service is named the same way (`ServiceSpec.service_id()`); its `kind` is in the digested
bytes, a job's (absent or `job`) is not, so every job id stays what it was. A `kind: pod`
spec (`PodSpec`) is a machine a researcher logs in to over SSH (with the one public key it
names), paid per second while it runs, its /workspace kept a stated time after it stops.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, Self, TypeVar
from urllib.parse import urlsplit

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from offchain.core.errors import UnchainedError

MAX_SUPPLY_LOVELACE = 45_000_000_000_000_000  # no price can exceed all ADA there is
MAX_DURATION_S = 30 * 24 * 3600
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# docker's reference grammar, simplified: [host[:port]/]path[:tag][@digest], path lower-case
_COMPONENT = r"[a-z0-9]+(?:[._-]+[a-z0-9]+)*"
IMAGE_REFERENCE = re.compile(
    rf"(?:[a-zA-Z0-9.-]+(?::[0-9]+)?/)?{_COMPONENT}(?:/{_COMPONENT})*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[0-9a-f]{64})?"
)
INPUT_SCHEMES = ("https", "http", "data")
# the provider pins GPUs (NVIDIA_*) and a GPU slice's MPS limits (CUDA_MPS_*) itself: a job may
# not widen them
PROVIDER_ENV_PREFIXES = ("NVIDIA_", "CUDA_MPS_")
HEALTH_PATH = re.compile(r"/[!-~]{0,255}")  # printable ASCII, no spaces
MAX_REPLICAS = 64
MAX_START_TIMEOUT_S = 3600  # a large model's weights may take a while to load
MAX_SCALE_DOWN_AFTER_S = 86_400  # a replica idle a day goes, whatever the spec says
MAX_PROVIDERS = 4  # providers one endpoint runs on at once (each paid over its own channel)
KINDS = ("job", "service", "llm", "pod")
DEFAULT_POD_IMAGE = "unchained/pod:latest"  # Debian, python3 and sshd: provider/images/pod.py
MAX_WORKSPACE_KEEP_S = 30 * 24 * 3600
SSH_KEY_TYPES = ("ssh-ed25519", "ssh-rsa", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384",
                 "ecdsa-sha2-nistp521")  # fmt: skip
MAX_SSH_KEY_CHARS = 8192  # a 16384-bit RSA key is about 2,800
T = TypeVar("T")


class JobSpecError(UnchainedError, ValueError):
    """A job spec that cannot be read or is not valid; the message names each bad field."""


# the escapes JSON's short forms give; other control characters become \u00xx
_ESCAPES = {
    '"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"
}  # fmt: skip


def canonical_json(value: Any) -> bytes:
    """RFC 8785-style JSON: object keys sorted (by UTF-16 code units), no insignificant
    whitespace, strings escaped only where JSON must, UTF-8. Integers are written in full
    (exact beyond 2**53 too) and floats are refused: two encoders agree on no float's digits.
    `model_dump_json()` is not canonical (field order, not sorted keys)."""
    try:
        return _encode(value).encode()
    except UnicodeEncodeError as exc:
        raise JobSpecError(f"not canonical JSON: a string is not valid Unicode ({exc})") from exc


def _encode(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, list | tuple):
        return "[" + ",".join(_encode(item) for item in value) + "]"
    if isinstance(value, dict) and all(isinstance(key, str) for key in value):
        keys = sorted(value, key=lambda key: key.encode("utf-16-be", "surrogatepass"))
        return "{" + ",".join(f"{_string(key)}:{_encode(value[key])}" for key in keys) + "}"
    raise JobSpecError(f"not canonical JSON: {type(value).__name__} {value!r} (integers only)")


def _string(text: str) -> str:
    escaped = (_ESCAPES.get(c) or (f"\\u{ord(c):04x}" if c < " " else c) for c in text)
    return '"' + "".join(escaped) + '"'


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class InputFile(_Strict):
    """One file the provider fetches and verifies before the job starts; mounted under /in."""

    path: str = Field(description="Path under /in, relative, e.g. data/train.csv.")
    url: str = Field(description="https://, http:// or data: URL the provider fetches.")
    sha256: str = Field(description="Hex sha256 of the file; a mismatch fails the job.")

    @field_validator("path")
    @classmethod
    def _relative(cls, path: str) -> str:
        parts = path.split("/")
        if not path or path.startswith("/") or any(p in ("", ".", "..") for p in parts):
            raise ValueError("must be a relative path without '.', '..' or empty parts")
        return path

    @field_validator("url")
    @classmethod
    def _fetchable(cls, url: str) -> str:
        if urlsplit(url).scheme not in INPUT_SCHEMES:
            raise ValueError(f"scheme must be one of {', '.join(INPUT_SCHEMES)}")
        return url

    @field_validator("sha256")
    @classmethod
    def _hex_digest(cls, digest: str) -> str:
        if not re.fullmatch(r"[0-9a-f]{64}", digest):
            raise ValueError("must be 64 lower-case hex digits")
        return digest


FRACTION_FIELDS = ("gpu_memory_mib", "gpu_sm_percent")


class Bundle(_Strict):
    """GPUs, cores and memory: what a container may use. A service's whole bundle; a job's
    adds the size of its /out (`Resources`).

    `gpus` counts whole GPUs. A fraction of one GPU is asked with `gpus: 0` and both
    `gpu_memory_mib` (the device memory it needs) and `gpu_sm_percent` (its share of the SMs,
    1..100): it gets one slice of one GPU at least that large. Left at 0 (the default) they are
    not part of the spec's bytes, so every whole-GPU or CPU spec keeps its id."""

    gpus: int = Field(0, ge=0, le=64)
    min_vram_mib: int = Field(0, ge=0, le=1 << 24, description="Per GPU.")
    gpu_memory_mib: int = Field(0, ge=0, le=1 << 24, description="A fraction: its memory.")
    gpu_sm_percent: int = Field(0, ge=0, le=100, description="A fraction: its share of SMs.")
    cpu_cores: int = Field(1, ge=1, le=1024)
    memory_mib: int = Field(512, ge=16, le=1 << 24)

    @model_validator(mode="after")
    def _vram_needs_gpu(self) -> Self:
        if self.min_vram_mib and not self.gpus:
            raise ValueError("min_vram_mib is set but gpus is 0: ask for at least one GPU")
        if bool(self.gpu_memory_mib) != bool(self.gpu_sm_percent):
            raise ValueError("a fraction of a GPU names both gpu_memory_mib and gpu_sm_percent")
        if self.gpu_sm_percent and self.gpus:
            raise ValueError("gpu_memory_mib/gpu_sm_percent ask a fraction of one GPU: set gpus "
                             "to 0 (or ask whole GPUs with gpus and no fraction)")  # fmt: skip
        return self

    @property
    def fraction(self) -> tuple[int, int] | None:
        """(memory MiB, SM percent) of the one GPU slice asked, or None (whole GPUs or none)."""
        return (self.gpu_memory_mib, self.gpu_sm_percent) if self.gpu_sm_percent else None

    @model_serializer(mode="wrap")
    def _whole_gpus_unchanged(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if not self.gpu_sm_percent:
            for name in FRACTION_FIELDS:
                data.pop(name, None)
        return data


class Resources(Bundle):
    """The reserved bundle: what the job may use and what it pays for, second by second."""

    disk_mib: int = Field(256, ge=1, le=1 << 26, description="Size of /out.")


def _image_reference(cls: type, image: str) -> str:
    if not IMAGE_REFERENCE.fullmatch(image):
        raise ValueError("not a docker image reference (e.g. python:3.11 or ghcr.io/o/n:t)")
    return image


def _env_names(cls: type, env: dict[str, str]) -> dict[str, str]:
    for name in env:
        if not ENV_NAME.fullmatch(name):
            raise ValueError(f"{name!r} is not a variable name")
        for prefix in PROVIDER_ENV_PREFIXES:
            if name.startswith(prefix):
                raise ValueError(f"{name!r}: {prefix}* variables are set by the provider (the "
                                 "GPUs or GPU slice a job gets, and its limits); leave them "
                                 "out")  # fmt: skip
    return env


class _Spec(_Strict):
    """A job's or a service's spec: one digest rule for both."""

    def canonical_json(self) -> bytes:
        """Every field, defaults included, as canonical JSON: the bytes the id digests."""
        return canonical_json(self.model_dump(mode="json"))

    def digest(self) -> bytes:
        return hashlib.sha256(self.canonical_json()).digest()


class JobSpec(_Spec):
    """One job: the image and command to run, its inputs, its bundle and what it may cost."""

    image: str
    command: list[str] = Field(min_length=1, description="argv; no shell is added.")
    env: dict[str, str] = Field(default_factory=dict)
    inputs: list[InputFile] = Field(default_factory=list)
    resources: Resources = Field(default_factory=Resources)
    max_duration_s: int = Field(ge=1, le=MAX_DURATION_S, description="Killed after this.")
    max_price_lovelace: int = Field(
        ge=0, le=MAX_SUPPLY_LOVELACE, description="The most the whole job may cost."
    )
    network: bool = Field(False, description="Whether the job may reach the network.")

    _image = field_validator("image")(_image_reference)
    _env = field_validator("env")(_env_names)

    @model_validator(mode="after")
    def _unique_inputs(self) -> JobSpec:
        paths = [item.path for item in self.inputs]
        if len(paths) != len(set(paths)):
            raise ValueError("two inputs have the same path")
        return self

    def job_id(self) -> bytes:
        """The escrow's `job_id` for this spec: sha256 of its canonical JSON."""
        return self.digest()


class ServiceSpec(_Spec):
    """One service: a server in `image` answering HTTP on `port`, healthy when `health_path`
    answers 2xx, sold per request and/or per second through the provider's gateway. It has
    no /out (its writable space is /tmp, counted in its memory) and never reaches the
    network: it is only reached, through its one port."""

    kind: Literal["service"]
    image: str = Field(description="By tag or by digest (name@sha256:...).")
    command: list[str] | None = Field(None, min_length=1, description="argv; the image's own "
                                      "command when left out.")  # fmt: skip
    env: dict[str, str] = Field(default_factory=dict)
    port: int = Field(ge=1, le=65535, description="The one port the server listens on.")
    health_path: str = Field("/health", description="Answers 2xx once the server is ready.")
    resources: Bundle = Field(default_factory=Bundle)
    price_per_request: int = Field(0, ge=0, le=MAX_SUPPLY_LOVELACE, description="Lovelace.")
    price_per_second: int = Field(0, ge=0, le=MAX_SUPPLY_LOVELACE, description="Lovelace.")
    replicas: int = Field(1, ge=1, le=MAX_REPLICAS)
    min_replicas: int | None = Field(None, ge=0, le=MAX_REPLICAS, description="Replicas kept "
                                     "warm when idle (0: scale to zero, no per-second price "
                                     "while at zero); `replicas` when left out.")  # fmt: skip
    scale_down_after_s: int = Field(300, ge=1, le=MAX_SCALE_DOWN_AFTER_S, description="Seconds "
                                    "without a request after which replicas above "
                                    "`min_replicas` stop.")  # fmt: skip
    providers: int = Field(1, ge=1, le=MAX_PROVIDERS, description="Run it on this many "
                           "providers at once; the client calls a healthy one.")  # fmt: skip

    _image = field_validator("image")(_image_reference)
    _env = field_validator("env")(_env_names)

    @field_validator("health_path")
    @classmethod
    def _path(cls, path: str) -> str:
        if not HEALTH_PATH.fullmatch(path):
            raise ValueError("must be an absolute URL path such as /health (no spaces, at most "
                             "256 characters)")  # fmt: skip
        return path

    @model_validator(mode="after")
    def _priced(self) -> ServiceSpec:
        if not (self.price_per_request or self.price_per_second):
            raise ValueError("a service names price_per_request and/or price_per_second")
        return self

    @model_validator(mode="after")
    def _scaled(self) -> ServiceSpec:
        if self.min_replicas is not None and self.min_replicas > self.replicas:
            raise ValueError(f"min_replicas {self.min_replicas} is above replicas {self.replicas}")
        return self

    @property
    def warm_replicas(self) -> int:
        """The replicas kept running however idle (`replicas` unless the spec scales)."""
        return self.replicas if self.min_replicas is None else self.min_replicas

    def service_id(self) -> bytes:
        """sha256 of the spec's canonical JSON, as a job's id is (`kind` keeps the two apart)."""
        return self.digest()


class LlmSpec(ServiceSpec):
    """A service that speaks OpenAI's API (/v1/completions, /v1/chat/completions,
    /v1/embeddings, /v1/models), sold per token: the gateway bills each answer's `usage` (a
    stream's, chunk by chunk) at `price_per_input_token` and `price_per_output_token`, on top
    of any price per request or second. A ServiceSpec in every other way (the provider runs it
    as one); its own kind so a renter's signed spec says how it is billed."""

    kind: Literal["llm"]  # type: ignore[assignment]  # a service's kind of its own
    price_per_input_token: int = Field(0, ge=0, le=MAX_SUPPLY_LOVELACE, description="Lovelace.")
    price_per_output_token: int = Field(0, ge=0, le=MAX_SUPPLY_LOVELACE, description="Lovelace.")
    start_timeout_s: int = Field(120, ge=1, le=MAX_START_TIMEOUT_S, description="Seconds its "
                                 "replicas have to answer their health path: else it is "
                                 "stopped and nothing is owed for it.")  # fmt: skip

    @model_validator(mode="after")
    def _priced(self) -> LlmSpec:
        if not (self.price_per_input_token or self.price_per_output_token):
            raise ValueError("an llm endpoint names price_per_input_token and/or "
                             "price_per_output_token")  # fmt: skip
        return self


class PodSpec(_Spec):
    """One pod: a container running sshd that only `ssh_key` logs in to (as user `pod`, home
    /workspace), sold per second through the provider's gateway. Its /workspace outlives it by
    `workspace_keep_s`, so the renter can come back to it; its image must be the pod image or
    one built from it (the provider's sshd setup lives there)."""

    kind: Literal["pod"]
    image: str = Field(DEFAULT_POD_IMAGE, description="By tag or by digest (name@sha256:...).")
    resources: Bundle = Field(default_factory=Bundle)
    ssh_key: str = Field(description="One OpenSSH public key line (ed25519, rsa or ecdsa).")
    price_per_second: int = Field(ge=1, le=MAX_SUPPLY_LOVELACE, description="Lovelace.")
    workspace_keep_s: int = Field(3600, ge=0, le=MAX_WORKSPACE_KEEP_S, description="How long "
                                  "/workspace is kept after the pod stops.")  # fmt: skip

    _image = field_validator("image")(_image_reference)

    @field_validator("ssh_key")
    @classmethod
    def _ssh_key(cls, line: str) -> str:
        return ssh_public_key(line)

    def pod_id(self) -> bytes:
        """sha256 of the spec's canonical JSON (`kind` keeps it apart from jobs and services)."""
        return self.digest()


def ssh_public_key(line: str) -> str:
    """`line` if it is one OpenSSH public key (`TYPE BASE64 [COMMENT]`, no options, a type of
    SSH_KEY_TYPES, the base64 blob naming the same type); ValueError saying what is wrong. It
    becomes the pod's authorized_keys: nothing but the key may get in there."""
    line = line.strip()
    if not line or len(line) > MAX_SSH_KEY_CHARS or not line.isprintable() or not line.isascii():
        raise ValueError(f"must be one line of printable ASCII, at most {MAX_SSH_KEY_CHARS} "
                         "characters (the .pub file's content)")  # fmt: skip
    kind, _, rest = line.partition(" ")
    if kind not in SSH_KEY_TYPES:
        raise ValueError(f"must start with the key's type, one of {', '.join(SSH_KEY_TYPES)} "
                         "(no options): the content of a .pub file")  # fmt: skip
    blob_text = rest.split(" ", 1)[0]
    try:
        blob = base64.b64decode(blob_text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError("the key is not valid base64") from exc
    named = int.from_bytes(blob[:4], "big")
    if len(blob) < 4 + named + 4 or blob[4 : 4 + named] != kind.encode():
        raise ValueError(f"the key's data is not a {kind} key")
    return line


def describe(error: ValidationError) -> str:
    """One line per problem, naming the field as the YAML spells it."""
    lines = []
    for problem in error.errors():
        where = ".".join(str(part) for part in problem["loc"]) or "spec"
        if problem["type"] == "extra_forbidden":
            lines.append(f"{where}: unknown field")
        elif problem["type"] == "missing":
            lines.append(f"{where}: required field is missing")
        else:
            lines.append(f"{where}: {problem['msg'].removeprefix('Value error, ')}")
    return "\n".join(lines)


def parse_spec(data: Any) -> JobSpec | ServiceSpec | PodSpec:
    """A JobSpec, a ServiceSpec for `kind: service` (an LlmSpec for `kind: llm`), a PodSpec
    for `kind: pod`, from already-parsed data; JobSpecError saying what is wrong. A job's
    `kind: job` may be written or not: it is not part of the job (its id is the same either
    way)."""
    if not isinstance(data, dict):
        raise JobSpecError("a job spec is a mapping of fields (image, command, ...)")
    kind = data.get("kind", "job")
    if kind not in KINDS:
        raise JobSpecError(f"kind: must be one of {', '.join(KINDS)}, not {kind!r}")
    try:
        if kind == "service":
            return ServiceSpec.model_validate(data)
        if kind == "llm":
            return LlmSpec.model_validate(data)
        if kind == "pod":
            return PodSpec.model_validate(data)
        return JobSpec.model_validate({k: v for k, v in data.items() if k != "kind"})
    except ValidationError as exc:
        raise JobSpecError(describe(exc)) from exc


def parse_jobspec(data: Any) -> JobSpec:
    """A JobSpec from already-parsed data, or JobSpecError saying what is wrong."""
    spec = parse_spec(data)
    if not isinstance(spec, JobSpec):
        raise JobSpecError(f"kind: {spec.kind}: this is a {spec.kind} spec, not a job")
    return spec


def parse_servicespec(data: Any) -> ServiceSpec:
    """A ServiceSpec from already-parsed data, or JobSpecError saying what is wrong."""
    spec = parse_spec(data)
    if not isinstance(spec, ServiceSpec):
        raise JobSpecError("kind: a service spec says kind: service (or llm)")
    return spec


def parse_podspec(data: Any) -> PodSpec:
    """A PodSpec from already-parsed data, or JobSpecError saying what is wrong."""
    spec = parse_spec(data)
    if not isinstance(spec, PodSpec):
        raise JobSpecError("kind: a pod spec says kind: pod")
    return spec


def _yaml(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise JobSpecError(f"not valid YAML: {exc}") from exc


def spec_from_yaml(text: str) -> JobSpec | ServiceSpec | PodSpec:
    """Any spec, from YAML (or JSON) text; JobSpecError saying what is wrong."""
    return parse_spec(_yaml(text))


def jobspec_from_yaml(text: str) -> JobSpec:
    return parse_jobspec(_yaml(text))


def servicespec_from_yaml(text: str) -> ServiceSpec:
    return parse_servicespec(_yaml(text))


def _load(path: Path, parse: Callable[[str], T]) -> T:
    try:
        text = path.read_text()
    except OSError as exc:
        raise JobSpecError(f"cannot read {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise JobSpecError(f"{path} is not text (byte {exc.start}: {exc.reason})") from exc
    try:
        return parse(text)
    except JobSpecError as exc:
        raise JobSpecError(f"{path}:\n{exc}") from exc


def load_jobspec(path: Path) -> JobSpec:
    return _load(path, jobspec_from_yaml)


def load_servicespec(path: Path) -> ServiceSpec:
    return _load(path, servicespec_from_yaml)
