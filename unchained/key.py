"""`unchained key`: seal a key file with a passphrase, or unseal it (`offchain.core.sealed_keys`).
Any key file: the provider's `provider.skey`, a renter's key or mnemonic, the market's wallet.
The file is replaced whole (written beside it, then renamed), mode 0600: a crash leaves the
old file or the new one, never half of either."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, cast

import typer

from offchain.core.sealed_keys import (
    COSTS,
    PASSPHRASE_VARIABLE,
    KeyFileError,
    Strength,
    is_sealed,
    passphrase_for,
    read_key_text,
    seal,
)

app = typer.Typer(help="Seal a key file with a passphrase, or unseal it.", no_args_is_help=True)
KeyFile = Annotated[Path, typer.Argument(help="The key file.", exists=True, dir_okay=False)]


def replace(path: Path, text: str) -> None:
    """Write `text` over `path` at once (a new file renamed over it), readable by its owner."""
    fresh = path.with_name(f".{path.name}.new")
    fd = os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as file:
        file.write(text)
        file.flush()
        os.fsync(file.fileno())
    fresh.replace(path)


def new_passphrase(path: Path) -> str:
    """The passphrase to seal with: the variable, or asked twice on a terminal."""
    if os.environ.get(PASSPHRASE_VARIABLE) or not sys.stdin.isatty():
        return passphrase_for(path)
    import getpass

    first = getpass.getpass(f"new passphrase for {path}: ")
    if getpass.getpass("again: ") != first:
        raise KeyFileError("the two passphrases differ: nothing changed")
    return first


@app.command("seal")
def seal_command(
    path: KeyFile,
    strength: Annotated[
        str,
        typer.Option(
            help="Argon2id cost: interactive (64 MiB), moderate (256 MiB) or "
            "sensitive (1 GiB, seconds)."
        ),
    ] = "moderate",
) -> None:
    """Seal PATH with a passphrase (UNCHAINED_KEY_PASSPHRASE, or asked twice)."""
    try:
        text = path.read_text()
        if is_sealed(text):
            raise KeyFileError(f"{path} is sealed already")
        if strength not in COSTS:
            raise KeyFileError(f"--strength {strength}: one of {', '.join(COSTS)}")
        sealed = seal(text, new_passphrase(path), cast(Strength, strength))
    except (KeyFileError, UnicodeDecodeError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    replace(path, sealed)
    typer.echo(f"{path} sealed: every process that reads it needs the passphrase")


@app.command("unseal")
def unseal_command(path: KeyFile) -> None:
    """Write PATH back as a plain key file (its passphrase needed)."""
    try:
        text = path.read_text()
        if not is_sealed(text):
            raise KeyFileError(f"{path} is not sealed")
        plain = read_key_text(path)
    except (KeyFileError, UnicodeDecodeError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    replace(path, plain)
    typer.echo(f"{path} unsealed: anyone who reads it can spend with it")
