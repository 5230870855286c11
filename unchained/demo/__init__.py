"""`unchained demo`: the whole market on this machine in one command. A fresh devnet, the
validators deployed, the market with its explorer and a provider daemon as child processes;
consumers submit the sample job (a small NumPy network trained in a container) with the
consumer CLI, follow it live, verify its result and see every party's balance on chain."""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Annotated

import typer

from contracts import SETTLE_BATCH_MAX
from offchain.core.errors import UnchainedError

app = typer.Typer()


@app.callback(invoke_without_command=True)
def demo(
    data_dir: Annotated[
        Path,
        typer.Option(
            resolve_path=True,  # absolute from here on: docker mounts it, the devnet keeps it
            help="Where the demo keeps its chain, keys, logs and job results.",
        ),
    ] = Path("data/demo"),
    port: Annotated[
        int | None,
        typer.Option(help="Port for the demo's devnet [default: a free one, beside any other]."),
    ] = None,
    jobs: Annotated[
        int,
        typer.Option(
            min=1,
            max=SETTLE_BATCH_MAX,  # all settled in one batch
            help="Jobs from as many consumers at once, settled in one batch.",
        ),
    ] = 1,
    services: Annotated[
        bool,
        typer.Option(
            "--services",
            help="Inference endpoints and a pod paid over payment channels instead of jobs: "
            "the sample ONNX model deployed and called a few hundred times, a pod started and "
            "stopped, every channel claimed in one transaction.",
        ),
    ] = False,
    exit_: Annotated[
        bool,
        typer.Option("--exit", help="Stop once settled [default when not in a terminal]."),
    ] = False,
    realistic: Annotated[
        bool,
        typer.Option(
            "--realistic",
            help="A devnet that makes blocks as mainnet does (Praos: a block in one slot of "
            "20, on 25 ms slots, so every 0.5 s on average) and forks now and then.",
        ),
    ] = False,
) -> None:
    """Run the whole market locally: devnet, market + explorer, provider, consumers."""
    from offchain.chain.context import quiet_chain_clients
    from unchained.demo import services as services_demo
    from unchained.demo.children import DemoFailed
    from unchained.demo.stage import demo_chain
    from unchained.demo.story import run

    quiet_chain_clients()
    # SIGTERM unwinds like Ctrl-C, so the children (in sessions of their own) are stopped too
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    stay = not exit_ and sys.stdin.isatty() and sys.stdout.isatty()
    data_dir.mkdir(parents=True, exist_ok=True)
    chain = demo_chain(data_dir, port, realistic)
    try:
        if services:
            services_demo.run(data_dir, chain, stay)
        else:
            run(data_dir, chain, jobs, stay)
    except (DemoFailed, UnchainedError) as exc:
        typer.echo(f"\nthe demo failed: {exc}", err=True)
        raise typer.Exit(1) from exc
    except KeyboardInterrupt:
        typer.echo("\nstopped: the devnet, market and provider daemon are down")
