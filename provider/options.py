"""Options and helpers shared by the provider's commands (`unchained provider ...`), so every
command reads the same flags, environment variables and config the same way.

Only typer and the config are imported here: `unchained provider --help` (and `deploy`'s) reads
these options, and the chain's clients (pycardano, Ogmios) are imported by the helpers that use
them (tests/test_cli_imports.py)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from provider.config import ConfigError, RunnerSettings, load_config

if TYPE_CHECKING:
    from pycardano.backend.ogmios_v6 import OgmiosV6ChainContext

    from offchain.protocol.deployment import Deployment

DEFAULT_CONFIG = Path("data/provider/provider.toml")
DEFAULT_DEPLOYMENT = Path("data/deployment.json")

# Paths from flags, environment variables and defaults are made absolute here, once
# (`resolve_path`): what reaches the runner, docker and the files does not depend on the
# directory a command was started in.
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
        envvar="UNCHAINED_PROVIDER_STATE_DIR",
        resolve_path=True,
        help="Where the key, jobs and results live [default: state/ beside the config].",
    ),
]
OgmiosOption = Annotated[
    str, typer.Option("--ogmios-url", envvar="UNCHAINED_OGMIOS_URL", help="The chain's Ogmios.")
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


def fail(message: str, code: int = 2) -> typer.Exit:
    typer.echo(message, err=True)
    return typer.Exit(code)


def runner_settings(config: Path, state_dir: Path | None) -> RunnerSettings:
    """The runner's settings without a config file at `config`: the state directory from the
    flag, else beside where the config would be."""
    given = {"state_dir": state_dir} if state_dir else {}
    return RunnerSettings.model_validate(given, context={"base_dir": config.parent})


def state_dir_of(config: Path, state_dir: Path | None) -> Path:
    """The state directory: the flag, else the config's, else the default."""
    if state_dir is not None:
        return state_dir
    if not config.exists():
        return runner_settings(config, None).state_dir
    try:
        return load_config(config).runner.state_dir
    except ConfigError as exc:
        raise fail(str(exc)) from exc


def open_deployment(url: str, path: Path) -> tuple[OgmiosV6ChainContext, Deployment]:
    """A chain context for `url` and the deployment file at `path`, read against that chain."""
    from offchain.chain.context import chain_context, quiet_chain_clients
    from offchain.chain.submit import UNREACHABLE
    from offchain.protocol import deployment_file

    quiet_chain_clients()
    try:
        context = chain_context(url)
        return context, deployment_file.load(path, context)
    except ValueError as exc:  # a malformed URL or an unusable deployment file
        raise fail(str(exc)) from exc
    except UNREACHABLE as exc:
        raise fail(f"cannot reach Ogmios at {url}: {exc}", code=1) from exc


@contextmanager
def reported() -> Iterator[None]:
    """Turn what a chain command can run into (a refusal, the ledger's no, a lost connection)
    into one line on stderr and exit code 1."""
    from ogmios.errors import ResponseError

    from offchain.chain.submit import UNREACHABLE, ChainError
    from offchain.protocol.refusal import Refused
    from offchain.protocol.txbuild import BuildError
    from provider.keys import KeyFileError
    from provider.receipts import ReceiptError

    try:
        yield
    except (BuildError, ChainError, KeyFileError, ReceiptError, Refused) as exc:
        raise fail(str(exc), code=1) from exc
    except ResponseError as exc:  # pycardano's Ogmios client: e.g. a script failed evaluation
        raise fail(f"Ogmios refused: {exc}", code=1) from exc
    except UNREACHABLE as exc:
        raise fail(f"lost the chain: {exc}", code=1) from exc
