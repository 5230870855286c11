"""The operator's offer (which GPUs, how many cores, how much memory and disk, at what prices)
and the daemon's and runner's settings, read from a TOML file (`[offer]`, `[daemon]`,
`[runner]`) under flags and `UNCHAINED_PROVIDER_*` variables, in the project's order
(`offchain.core.settings`).

Prices are integer lovelace per second of each resource; a job pays for its whole reserved
bundle every second it runs (rounded up), whatever it actually used.

Paths are absolute once read: a relative path in the TOML file is read from the file's folder
(so the same file means the same state wherever the provider starts), one from a flag or a
variable from the working directory, and the state directory defaults to `state/` beside the
file.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeInt,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import SettingsConfigDict

from contracts import SETTLE_BATCH_MAX
from offchain.core.errors import UnchainedError
from offchain.core.settings import FileUse, LayeredSettings, SettingsFileError
from offchain.protocol.job.gpu_slices import MAX_SLICES_PER_GPU, slice_price
from offchain.protocol.job.jobspec import JobSpec, Resources, describe
from provider.gpu.inventory import HostInventory

MIB = 1 << 20
STATE_DIR = Path("state")  # beside the config file, unless it names another


class ConfigError(UnchainedError, ValueError):
    """The provider config cannot be read or does not make sense; the message says where."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class Prices(_Section):
    """Lovelace per second of one unit of each resource in the bundle."""

    gpu: int = Field(2_000, ge=0, description="per GPU")
    cpu_core: int = Field(20, ge=0, description="per core")
    memory_gib: int = Field(5, ge=0, description="per GiB of memory, rounded up")
    disk_gib: int = Field(1, ge=0, description="per GiB of /out, rounded up")


class SharedGpu(_Section):
    """One GPU shared with the operator's own work (`[[offer.shared_gpus]]`): what the operator
    keeps (memory and a share of the SMs, e.g. for a miner) and the equal slices rented beside
    it. A slice's size is given or derived: what is not kept, divided by `slices` (rounded
    down). The slices and what is kept must fit the GPU: its memory and 100% of its SMs."""

    uuid: str = Field(min_length=1, description="the GPU's UUID (GPU-...)")
    keep_memory_mib: int = Field(0, ge=0, description="device memory kept for the operator")
    keep_sm_percent: int = Field(0, ge=0, le=99, description="share of the SMs kept")
    slices: int = Field(ge=1, le=MAX_SLICES_PER_GPU, description="slices rented on this GPU")
    slice_memory_mib: int | None = Field(None, ge=1, description="unset: derived")
    slice_sm_percent: int | None = Field(None, ge=1, le=100, description="unset: derived")

    @model_validator(mode="after")
    def _sm_fits(self) -> SharedGpu:
        sm = self.sm_percent()
        if sm < 1:
            free = 100 - self.keep_sm_percent
            raise ValueError(f"{self.uuid}: {self.slices} slices of the {free}% of SMs not "
                             "kept leave less than 1% each")  # fmt: skip
        if self.slices * sm + self.keep_sm_percent > 100:
            raise ValueError(f"{self.uuid}: {self.slices} slices x {sm}% SMs + "
                             f"{self.keep_sm_percent}% kept is more than 100% of the GPU's "
                             "SMs")  # fmt: skip
        return self

    def sm_percent(self) -> int:
        """One slice's share of the SMs."""
        return self.slice_sm_percent or (100 - self.keep_sm_percent) // self.slices

    def memory_mib(self, total_mib: int) -> int:
        """One slice's memory on a GPU of `total_mib`; ConfigError when the slices and what is
        kept do not fit it."""
        size = self.slice_memory_mib or (total_mib - self.keep_memory_mib) // self.slices
        if size < 1 or self.slices * size + self.keep_memory_mib > total_mib:
            raise ConfigError(
                f"offer.shared_gpus {self.uuid}: {self.slices} slices x {max(size, 0)} MiB + "
                f"{self.keep_memory_mib} MiB kept do not fit the GPU's {total_mib} MiB"
            )
        return size


class Offer(_Section):
    """What the operator lends to jobs, and for how much."""

    gpus: list[str] = Field(default_factory=list, description="GPU UUIDs offered")
    shared_gpus: list[SharedGpu] = Field(
        default_factory=list, description="GPUs shared with the operator's work, in slices"
    )
    cpu_cores: int = Field(ge=1, description="cores offered, in all")
    memory_mib: int = Field(ge=16, description="memory offered, in all")
    disk_mib: int = Field(ge=1, description="disk for /out offered, in all")
    cpu_bundles: int = Field(
        1, ge=1, description="without GPUs: jobs at once, each a share of the cores"
    )
    prices: Prices = Field(default_factory=Prices)
    request_price: int | None = Field(
        None, ge=0, description="lovelace per request of an endpoint at least (unset: no "
        "per-request endpoints; per-second ones pay the bundle's price)",
    )  # fmt: skip
    token_prices: list[NonNegativeInt] | None = Field(
        None, min_length=2, max_length=2, description="lovelace per input token and per "
        "output token of an llm endpoint (`kind: llm`) at least, e.g. [2, 8] (unset: no llm "
        "endpoints)",
    )  # fmt: skip

    @property
    def llm_prices(self) -> tuple[int, int] | None:
        """`token_prices` as (input, output), or None."""
        return None if self.token_prices is None else (self.token_prices[0], self.token_prices[1])

    @model_validator(mode="after")
    def _whole_or_shared(self) -> Offer:
        shared = [gpu.uuid for gpu in self.shared_gpus]
        twice = sorted({uuid for uuid in shared if shared.count(uuid) > 1})
        if twice:
            raise ValueError(f"shared_gpus names {', '.join(twice)} twice")
        both = sorted(set(shared) & set(self.gpus))
        if both:
            raise ValueError(f"{', '.join(both)}: a GPU is offered whole (gpus) or shared "
                             "(shared_gpus), not both")  # fmt: skip
        return self

    def price_per_unit(self, spec: JobSpec) -> int:
        """Lovelace per billed second of the spec's bundle."""
        return self.bundle_price(spec.resources)

    def bundle_price(self, wanted: Resources) -> int:
        """Lovelace per second of a bundle of `wanted` resources (a GPU slice: the GPU's price
        pro rata by its share of the SMs, rounded up)."""
        return (
            wanted.gpus * self.prices.gpu
            + slice_price(self.prices.gpu, wanted.gpu_sm_percent)
            + wanted.cpu_cores * self.prices.cpu_core
            + -(-wanted.memory_mib // 1024) * self.prices.memory_gib
            + -(-wanted.disk_mib // 1024) * self.prices.disk_gib
        )

    def refusal(self, spec: JobSpec, inventory: HostInventory) -> str | None:
        """Why this offer cannot take the job, or None when it can."""
        wanted = spec.resources
        fitting = self.fitting_gpus(spec, inventory)
        worst_case = self.price_per_unit(spec) * spec.max_duration_s
        checks = [
            (len(fitting) < wanted.gpus, f"{wanted.gpus} GPU(s) with "
             f">= {wanted.min_vram_mib} MiB wanted, {len(fitting)} offered"),
            (wanted.fraction is not None and not self.fitting_slices(spec, inventory),
             f"a GPU slice of {wanted.gpu_memory_mib} MiB and {wanted.gpu_sm_percent}% of the "
             "SMs wanted, no shared GPU offers one that large"),
            (wanted.cpu_cores > self.cpu_cores, f"{wanted.cpu_cores} cores wanted, "
             f"{self.cpu_cores} offered"),
            (wanted.memory_mib > self.memory_mib, f"{wanted.memory_mib} MiB memory wanted, "
             f"{self.memory_mib} offered"),
            (wanted.disk_mib > self.disk_mib, f"{wanted.disk_mib} MiB disk wanted, "
             f"{self.disk_mib} offered"),
            (worst_case > spec.max_price_lovelace, f"{spec.max_duration_s} s at "
             f"{self.price_per_unit(spec)} lovelace/s costs up to {worst_case} lovelace, "
             f"more than max_price_lovelace {spec.max_price_lovelace}"),
        ]  # fmt: skip
        reasons = [reason for failed, reason in checks if failed]
        return "; ".join(reasons) or None

    def fitting_slices(self, spec: JobSpec, inventory: HostInventory) -> list[str]:
        """Shared GPUs present whose slices hold the fraction the spec asks, in offer order."""
        fraction = spec.resources.fraction
        present = {gpu.uuid: gpu.memory_bytes // MIB for gpu in inventory.gpu.gpus}
        return [
            shared.uuid for shared in self.shared_gpus
            if fraction is not None and shared.uuid in present
            and fraction[0] <= shared.memory_mib(present[shared.uuid])
            and fraction[1] <= shared.sm_percent()
        ]  # fmt: skip

    def fitting_gpus(self, spec: JobSpec, inventory: HostInventory) -> list[str]:
        """Offered GPUs present on this machine with enough memory, in offer order."""
        present = {gpu.uuid: gpu for gpu in inventory.gpu.gpus}
        need = spec.resources.min_vram_mib * MIB
        return [u for u in self.gpus if u in present and present[u].memory_bytes >= need]


class RunnerSettings(_Section):
    """How jobs run on this machine (not part of any offer)."""

    state_dir: Path = Field(
        STATE_DIR, strict=False, validate_default=True,
        description="the key, journal, job folders and books (absolute)",
    )  # fmt: skip
    uid: int = Field(65534, ge=1, description="jobs never run as root")
    gid: int = Field(65534, ge=1, description="the group jobs run as")
    pids_limit: int = Field(1024, ge=8, description="processes one job may have")
    tmp_mib: int = Field(256, ge=1, description="/tmp tmpfs; counts against the job's memory")
    pull_images: bool = Field(
        False, description="pull a missing image when a registry answers; the offer says so, "
        "and the market matches it jobs for images not on this machine",
    )  # fmt: skip
    inputs_deadline_s: int = Field(300, ge=1, description="all of a job's inputs, fetched")
    inputs_allow: list[str] = Field(
        default_factory=list,
        description="networks input fetching may reach besides the public Internet (CIDR)",
    )

    @field_validator("inputs_allow")
    @classmethod
    def _networks(cls, networks: list[str]) -> list[str]:
        for network in networks:
            ipaddress.ip_network(network)  # a ValueError names the one that is not a network
        return networks

    @field_validator("state_dir")
    @classmethod
    def _absolute(cls, state_dir: Path) -> Path:
        """The runner is named by its state directory, so it must not depend on the directory
        the provider was started in: loading makes it absolute (`load_config`), code must."""
        if not state_dir.is_absolute():
            raise ValueError(f"{state_dir} is relative; give an absolute path")
        return state_dir


class DaemonSettings(_Section):
    """How `provider run` talks to the market and the chain (not part of any offer)."""

    market_url: str = Field("http://127.0.0.1:8080", description="the market it offers on")
    market_identity: str = Field("unchained-market", description="signed into each request")
    heartbeat_ms: int = Field(30_000, ge=100, description="heartbeat and bond check period")
    poll_s: int = Field(20, ge=0, description="long-poll wait for an assignment")
    grace_ms: int = Field(10 * 60_000, ge=0, description="SIGTERM: time left to running jobs")
    keep_jobs_at_stop: bool = Field(
        False, description="SIGTERM: a job still running after grace_ms keeps running, for the "
        "next start to recover (an upgrade in place); otherwise it is stopped, billed for the "
        "units it ran and delivered with what its /out holds (a training job's last "
        "checkpoint)",
    )  # fmt: skip
    stop_delivery_ms: int = Field(
        60_000, ge=0, description="SIGTERM: how long the jobs stopped after grace_ms have to "
        "deliver their results and receipts; one still undelivered then is delivered by the "
        "next start",
    )  # fmt: skip
    payout_every_ms: int = Field(30_000, ge=100, description="how often payouts are checked")
    payout_margin_ms: int = Field(
        5 * 60_000, ge=0, description="settle by itself this long before an escrow closes"
    )
    settle_batch_max: int = Field(
        SETTLE_BATCH_MAX, ge=1, description="escrows per settle transaction"
    )
    small_payout_wait_ms: int = Field(
        60_000, ge=0, description="a delivered receipt paying less than the ledger's minimum "
        "UTxO (which the market leaves to its provider) is settled by the daemon once "
        "settle_batch_max such wait or the oldest has waited this long",
    )  # fmt: skip
    finality_blocks: int = Field(
        3, ge=1, description="a payout (a settle of an escrow) counts as final, and the job's "
        "results are deleted, once its transaction is this many blocks deep; until then a "
        "rollback that undoes it has it settled again. Cardano's security parameter is 2160 "
        "blocks; on mainnet 15-30 is the usual choice",
    )  # fmt: skip
    confirm_blocks: int = Field(
        1, ge=1, description="money is accepted (an escrow signed for, a channel admitted) "
        "only once the transaction that made it is this many blocks deep (1: in a block), so "
        "a fork cannot take it back after the work is promised; mainnet: 3-10",
    )  # fmt: skip
    bond_minimum_lovelace: int = Field(0, ge=0, description="the market's minimum bond")
    payout_address: str | None = Field(
        None, max_length=255, description="where the provider is paid (offers, settlements, "
        "channel claims) and who owns its bond: a key's address (bech32) on the deployment's "
        "network, a cold wallet's, whose key need not be on this machine; unset: the provider "
        "key's own address",
    )  # fmt: skip
    channel_credit_lovelace: int = Field(
        1_000_000, ge=0, description="a payment channel is served while what was served "
        "exceeds its renter's acknowledged IOUs by at most this much",
    )  # fmt: skip
    channel_claim_interval_s: int = Field(
        3600, ge=1, description="how often every channel's latest IOU is claimed (batch "
        "transactions; the first IOU after a quiet spell at the next payout check); a channel "
        "whose renter started a close is claimed at the next payout check (payout_every_ms), "
        "whatever this says",
    )  # fmt: skip
    channel_claim_batch_max: int = Field(50, ge=1, description="channels per claim transaction")
    channel_min_deposit_lovelace: int = Field(
        5_000_000, ge=0, description="a channel is served only with at least this deposit"
    )
    channel_min_close_period_ms: int = Field(
        3600_000, ge=0, description="a channel is served only if its renter's close leaves "
        "the provider at least this long to make its last claim",
    )  # fmt: skip
    gateway_url: str | None = Field(
        None, pattern=r"^https?://[^/?#\s]+$", max_length=255, description="where renters "
        "reach this provider's gateway (`unchained provider gateway`), shown in its offer: "
        "http(s)://HOST:PORT; unset: it takes no deployments",
    )  # fmt: skip
    metrics_listen: str = Field(
        "127.0.0.1:9481", max_length=255, description="HOST:PORT where `provider run` serves "
        "its Prometheus metrics at /metrics (\"\": none)",
    )  # fmt: skip
    placement: Literal["host", "ray"] = Field(
        "host", description="where jobs and rentals run: `host`, this machine's docker "
        "engine; `ray`, the nodes of the Ray cluster at ray_address, each running them on its "
        "own engine (the provider guide's \"A fleet on Ray\")",
    )  # fmt: skip
    ray_address: str | None = Field(
        None, max_length=255, description="with placement = \"ray\": the cluster's head, "
        "HOST:PORT as the nodes' `ray start --address` names it",
    )  # fmt: skip
    ray_place_timeout_s: int = Field(
        30, ge=1, description="with placement = \"ray\": how long a job waits for a node "
        "with room for it (at its start, or after its node died) before it fails with a "
        "zero-unit receipt",
    )  # fmt: skip
    ray_checkpoint_every_s: int = Field(
        10, ge=1, description="with placement = \"ray\": how often a running job's /out is "
        "copied off its node when it changed, so that a job whose node dies restarts "
        "elsewhere from it",
    )  # fmt: skip
    gateway_metrics_listen: str = Field(
        "127.0.0.1:9482", max_length=255, description="HOST:PORT where `provider gateway` "
        "serves its Prometheus metrics at /metrics, apart from renters (\"\": none)",
    )  # fmt: skip

    @model_validator(mode="after")
    def _ray_address(self) -> DaemonSettings:
        if self.placement == "ray" and not self.ray_address:
            raise ValueError('placement = "ray" needs ray_address (the head\'s HOST:PORT)')
        return self

    @field_validator("payout_address")
    @classmethod
    def _key_address(cls, text: str | None) -> str | None:
        """An address a key owns: a bond's owner signs with it (PROTOCOL.md, bond)."""
        from offchain.protocol.ledger.addresses import key_address  # pycardano: when one is set

        if text is not None:
            key_address(text)
        return text


class ProviderSettings(LayeredSettings):
    """The daemon's and the runner's settings: all a command needs but the offer."""

    model_config = SettingsConfigDict(env_prefix="UNCHAINED_PROVIDER_", strict=True)
    env_aliases: ClassVar[Mapping[str, str]] = {
        "UNCHAINED_PROVIDER_STATE_DIR": "runner.state_dir",
        "UNCHAINED_PROVIDER_MARKET_URL": "daemon.market_url",
        "UNCHAINED_PROVIDER_MARKET_IDENTITY": "daemon.market_identity",
        "UNCHAINED_PROVIDER_PAYOUT_ADDRESS": "daemon.payout_address",
    }
    defaults_beside_file = True  # the state directory: `state/` beside the config

    daemon: DaemonSettings = Field(default_factory=DaemonSettings)
    # validated: built in code without one, the (relative) default state directory is refused
    runner: RunnerSettings = Field(default_factory=dict, validate_default=True)


class ProviderConfig(ProviderSettings):
    """The whole config: the settings and the offer."""

    offer: Offer

    @model_validator(mode="after")
    def _fleet_gpus_whole(self) -> ProviderConfig:
        """A fleet's GPUs are the nodes' to pick (Ray counts them): no slices, which MPS or
        MIG hold on the one machine whose daemon runs them."""
        if self.daemon.placement == "ray" and self.offer.shared_gpus:
            raise ValueError('placement = "ray" offers whole GPUs only: leave out shared_gpus')
        return self


S = TypeVar("S", bound=ProviderSettings)


def default_offer(inventory: HostInventory) -> Offer:
    """Everything the machine has, less a share kept for the host itself."""
    return Offer(
        gpus=[gpu.uuid for gpu in inventory.gpu.gpus],
        cpu_cores=inventory.cpu_cores,
        memory_mib=max(16, inventory.memory_bytes * 3 // 4 // MIB),
        disk_mib=max(1, inventory.disk_free_bytes // 2 // MIB),
    )


def load_config(
    path: Path, flags: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None
) -> ProviderConfig:
    """The config in the TOML file at `path` (which must be there), under `flags` (section ->
    field -> value; None: not given) and the environment's `UNCHAINED_PROVIDER_*` variables."""
    return _loaded(ProviderConfig, path, flags, environ, file="required")


def load_settings(
    path: Path, flags: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None
) -> ProviderSettings:
    """The settings without the config at `path` (there is none, or `init` is writing it):
    flags, variables and defaults, the state directory beside where the file would be."""
    return _loaded(ProviderSettings, path, flags, environ, file="folder only")


def _loaded(
    kind: type[S],
    path: Path,
    flags: Mapping[str, Any] | None,
    environ: Mapping[str, str] | None,
    file: FileUse,
) -> S:
    try:
        return kind.load(path, flags, environ, file=file)
    except SettingsFileError as exc:
        raise ConfigError(str(exc)) from exc
    except ValidationError as exc:
        raise ConfigError(f"{path}:\n{describe(exc)}") from exc


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return f"{value:_}"
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def to_toml(config: ProviderConfig) -> str:
    """The config as TOML, one table per section (nested models become sub-tables)."""
    lines: list[str] = []

    def table(name: str, values: dict[str, Any], header: str = "[{}]") -> None:
        lines.append(header.format(name))
        nested = {k: v for k, v in values.items() if isinstance(v, dict)}
        many = {k: v for k, v in values.items()  # a list of tables: [[name.key]] each
                if isinstance(v, list) and v and all(isinstance(i, dict) for i in v)}  # fmt: skip
        unset = {k for k, v in values.items() if v is None}  # TOML has no null: left out
        lines.extend(f"{k} = {_toml_value(v)}" for k, v in values.items()
                     if k not in nested and k not in unset and k not in many)  # fmt: skip
        lines.append("")
        for key, value in nested.items():
            table(f"{name}.{key}", value)
        for key, items in many.items():
            for item in items:
                table(f"{name}.{key}", item, "[[{}]]")

    sections = config.model_dump(mode="json")
    table("offer", sections.pop("offer"))  # first: it is what an operator reads and edits
    for section, values in sections.items():
        table(section, values)
    return "\n".join(lines)
