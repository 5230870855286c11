"""Options and helpers shared by the provider's commands (`unchained provider ...`), so every
command reads the same flags, environment variables and config the same way: the flags here,
then the settings' own order (`provider.config`: variables, the file, the defaults).

Only typer and the config are imported here: `unchained provider --help` (and `deploy`'s) reads
these options, and the chain's clients (pycardano, Ogmios) are imported by the helpers that use
them (tests/test_cli_imports.py)."""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from offchain.chain import DEFAULT_OGMIOS_URL
from offchain.chain.network import DEFAULT_NETWORK, SETTING_HELP
from provider.config import ConfigError, ProviderSettings, load_config, load_settings

if TYPE_CHECKING:
    from pycardano.backend.ogmios_v6 import OgmiosV6ChainContext

    from offchain.chain.network import ChainNetwork
    from offchain.protocol.tx.deployment import Deployment

DEFAULT_CONFIG = Path("data/provider/provider.toml")
DEFAULT_DEPLOYMENT = Path("data/deployment.json")


def variable(field: str) -> str:
    """The environment variable that sets `field` ("section.name"), for an option's help."""
    return next(name for name, path in ProviderSettings.env_aliases.items() if path == field)


# The config file, the chain and the deployment are found before any settings are read (and
# the consumer's commands take the same two chain options): typer reads their variables. Paths
# are made absolute once, as they come in (`resolve_path` here, the settings' loading for the
# others): what reaches the runner, docker and the files does not depend on the directory a
# command was started in.
ConfigOption = Annotated[
    Path,
    typer.Option(
        "--config",
        envvar="UNCHAINED_PROVIDER_CONFIG",
        resolve_path=True,
        help="The provider's TOML config.",
    ),
]
StateDirOption = Annotated[
    Path | None,
    typer.Option(
        help="Where the key, jobs and results live [env var: "
        f"{variable('runner.state_dir')}; default: the config's, else state/ beside it].",
    ),
]
OgmiosOption = Annotated[
    str, typer.Option("--ogmios-url", envvar="UNCHAINED_OGMIOS_URL", help="The chain's Ogmios.")
]
NetworkOption = Annotated[
    str, typer.Option("--network", envvar="UNCHAINED_NETWORK", help=f"The chain: {SETTING_HELP}")
]
DeploymentOption = Annotated[
    Path,
    typer.Option(
        "--deployment",
        envvar="UNCHAINED_DEPLOYMENT",
        resolve_path=True,
        help="The protocol deployment (JSON written when the contracts were deployed).",
    ),
]


@dataclasses.dataclass(frozen=True)
class ChainFlags:
    """The options of every command that reads the chain as this provider: where Ogmios
    answers, the deployment, and the config and state directory holding the provider's key."""

    ogmios_url: str
    deployment: Path
    config: Path
    state_dir: Path | None
    network: str = DEFAULT_NETWORK

    @property
    def state(self) -> Path:
        """The state directory they name (`state_dir_of`)."""
        return state_dir_of(self.config, self.state_dir)


_CHAIN_OPTIONS = [
    inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=option, default=default)
    for name, option, default in (
        ("ogmios_url", OgmiosOption, DEFAULT_OGMIOS_URL),
        ("deployment", DeploymentOption, DEFAULT_DEPLOYMENT),
        ("config", ConfigOption, DEFAULT_CONFIG),
        ("state_dir", StateDirOption, None),
        ("network", NetworkOption, DEFAULT_NETWORK),
    )
]


def chain_command(command: Callable[..., None]) -> Callable[..., None]:
    """`command`, whose first parameter is `flags: ChainFlags`, as typer sees it: taking the
    options of `ChainFlags` in its place, after its own (typer has no option groups, so the
    signature it reads is rewritten: the options are declared once, here)."""
    own = list(inspect.signature(command, eval_str=True).parameters.values())[1:]
    names = [option.name for option in _CHAIN_OPTIONS]

    @functools.wraps(command)
    def with_flags(**options: Any) -> None:
        command(ChainFlags(**{name: options.pop(name) for name in names}), **options)

    parameters = [*own, *_CHAIN_OPTIONS]
    signature = inspect.Signature(parameters, return_annotation=None)
    with_flags.__signature__ = signature  # type: ignore[attr-defined]
    with_flags.__annotations__ = {p.name: p.annotation for p in parameters}
    return with_flags


def fail(message: str, code: int = 2) -> typer.Exit:
    typer.echo(message, err=True)
    return typer.Exit(code)


def given(state_dir: Path | None, **daemon: str | None) -> dict[str, Any]:
    """The flags a command was given, as the settings take them (None: not given)."""
    return {"runner": {"state_dir": state_dir}, "daemon": daemon}


def settings_of(config: Path, flags: dict[str, Any], *, fresh: bool = False) -> ProviderSettings:
    """The config at `config` (a ProviderConfig, with its offer) under `flags`, or without one
    there (or `fresh`: `init` is about to write it) the settings alone; exit 2 on a bad one."""
    try:
        if config.exists() and not fresh:
            return load_config(config, flags)
        return load_settings(config, flags)
    except ConfigError as exc:
        raise fail(str(exc)) from exc


def state_dir_of(config: Path, state_dir: Path | None) -> Path:
    """The state directory: the flag, its variable, the config's, else beside the config."""
    return settings_of(config, given(state_dir)).runner.state_dir


def network_setting(text: str) -> ChainNetwork:
    """The network `--network` (or UNCHAINED_NETWORK) names; exit 2 saying what is accepted."""
    from offchain.chain.network import NetworkSettingError, parse_network

    try:
        return parse_network(text)
    except NetworkSettingError as exc:
        raise fail(str(exc)) from exc


def open_deployment(
    url: str, path: Path, network: str = DEFAULT_NETWORK, *, follows: bool = False
) -> tuple[OgmiosV6ChainContext, Deployment]:
    """A chain context for `url` and the deployment file at `path`, read against that chain
    once the start-up checks passed (`deployment_start`; `follows`: the daemon, which reads
    transactions' CBOR). A bad file or setting exits 2, a refusing chain 1."""
    from offchain.chain.context import quiet_chain_clients
    from offchain.chain.submit import UNREACHABLE
    from offchain.core.errors import UnchainedError
    from offchain.protocol.tx.deployment_start import open_checked

    chosen = network_setting(network)
    quiet_chain_clients()
    try:
        return open_checked(url, path, chosen, follows=follows)
    except ValueError as exc:  # a malformed URL or an unusable deployment file
        raise fail(str(exc)) from exc
    except UnchainedError as exc:  # another network's node or file, an unsupported Ogmios
        raise fail(str(exc), code=1) from exc
    except UNREACHABLE as exc:
        raise fail(f"cannot reach Ogmios at {url}: {exc}", code=1) from exc


@contextmanager
def reported() -> Iterator[None]:
    """Turn what a chain command can run into (a refusal, the ledger's no, a lost connection)
    into one line on stderr and exit code 1 (2: a setting that does not fit the chain)."""
    from ogmios.errors import ResponseError

    from offchain.chain.submit import UNREACHABLE, ChainError
    from offchain.core.sealed_keys import KeyFileError
    from offchain.protocol.checks.refusal import Refused
    from offchain.protocol.tx.txbuild import BuildError
    from provider.money.receipts import ReceiptError

    try:
        yield
    except ConfigError as exc:  # a setting read only against the chain (the payout's network)
        raise fail(str(exc)) from exc
    except (BuildError, ChainError, KeyFileError, ReceiptError, Refused) as exc:
        raise fail(str(exc), code=1) from exc
    except ResponseError as exc:  # pycardano's Ogmios client: e.g. a script failed evaluation
        raise fail(f"Ogmios refused: {exc}", code=1) from exc
    except UNREACHABLE as exc:
        raise fail(f"lost the chain: {exc}", code=1) from exc
