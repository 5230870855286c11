"""`unchained contracts`: rebuild the committed validator artifacts, or check they are current."""

from __future__ import annotations

from typing import Annotated

import typer

app = typer.Typer(help="The OpShin validators and their committed artifacts.", no_args_is_help=True)


@app.command()
def build(
    check: Annotated[
        bool, typer.Option("--check", help="Write nothing; exit 1 if a rebuild differs.")
    ] = False,
) -> None:
    """Compile the validators into contracts/build/<name>/ (script, hash, blueprint)."""
    from contracts.scripts import REPO_ROOT, build_artifacts  # the OpShin compiler: seconds

    differing = build_artifacts(check=check)
    for path in differing:
        typer.echo(f"{'differs' if check else 'wrote'}: {path.relative_to(REPO_ROOT)}")
    if check and differing:
        raise typer.Exit(1)
    if not differing:
        typer.echo("artifacts are up to date")
