"""`unchained deploy`: publish the validators on a chain and write the deployment file that the
chain commands read (`--deployment`), so that a devnet started by hand can take bonds and
escrows, not only the demo's own."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated

import typer

from offchain.chain.network import DEFAULT_NETWORK
from offchain.chain.ogmios import DEFAULT_OGMIOS_URL
from offchain.protocol.ledger.amounts import ada
from provider.cli.options import (
    DEFAULT_DEPLOYMENT,
    DeploymentOption,
    NetworkOption,
    OgmiosOption,
    fail,
    network_setting,
    reported,
)

app = typer.Typer()

DAY_MS = 24 * 3600 * 1000
# After an escrow's close only its consumer may refund it (and slash the bond with it): a day
# for a renter to notice an undelivered job, before any refund bot may return the escrow.
REFUND_WINDOW_MS = DAY_MS
# How long a bond stays unbonding before it may be withdrawn. A bond backs a job only while
# the consumer can still slash it: the notice must outlast the longest close the market quotes
# (quote ttl + the longest job + settle window, about 31 days) plus the refund window
# (tests/test_deploy.py checks the defaults agree).
NOTICE_MS = 32 * DAY_MS
SLASH_SHARE_BPS = 2_500  # the share of a bond a slash pays to the consumer, basis points


@app.callback(invoke_without_command=True)
def deploy_command(
    wallet: Annotated[
        Path,
        typer.Option(
            resolve_path=True,
            help="The cardano-cli signing key that pays (on the devnet, one of its wallets).",
        ),
    ] = Path("data/devnet/wallets/market.skey"),
    ogmios_url: OgmiosOption = DEFAULT_OGMIOS_URL,
    deployment: DeploymentOption = DEFAULT_DEPLOYMENT,
    notice_ms: Annotated[int, typer.Option(min=0, help="The bond's unbonding notice.")] = (
        NOTICE_MS
    ),
    slash_share_bps: Annotated[
        int, typer.Option(min=0, max=10_000, help="A slash's share of the bond.")
    ] = SLASH_SHARE_BPS,
    refund_window_ms: Annotated[
        int,
        typer.Option(min=0, help="After an escrow's close, how long only its consumer refunds."),
    ] = REFUND_WINDOW_MS,
    network: NetworkOption = DEFAULT_NETWORK,
) -> None:
    """Publish the escrow and bond validators as reference scripts; write DEPLOYMENT."""
    # nothing is signed before the node is found to run the network `--network` names
    if notice_ms <= refund_window_ms:
        # a bond covers jobs closing before its notice's end less the refund window: none
        raise fail(
            f"--notice-ms {notice_ms} must be longer than --refund-window-ms {refund_window_ms}: "
            "a bond covers only jobs closing more than the refund window before its notice ends"
        )
    chain = network_setting(network)
    from cbor2 import CBORError
    from pycardano import PaymentSigningKey
    from pycardano.exception import PyCardanoException

    from offchain.chain.context import chain_context, quiet_chain_clients
    from offchain.chain.follower import tip_point
    from offchain.chain.startup import check_start
    from offchain.chain.submit import UNREACHABLE, submit_confirmed
    from offchain.core.errors import UnchainedError
    from offchain.core.sealed_keys import read_key_text
    from offchain.protocol.tx import deployment_file
    from offchain.protocol.tx.deployment import deploy
    from offchain.protocol.tx.deployment_blueprint import deployment_blueprint
    from offchain.protocol.tx.txbuild import Wallet

    quiet_chain_clients()
    try:
        key = PaymentSigningKey.from_json(read_key_text(wallet))  # sealed or plain
    except (OSError, ValueError, KeyError, CBORError, PyCardanoException) as exc:
        raise fail(f"no signing key at {wallet} ({exc}); pass one with --wallet") from exc
    try:
        context = chain_context(ogmios_url, chain.pycardano)
    except ValueError as exc:
        raise fail(str(exc)) from exc
    payer = Wallet.of(key, chain.pycardano)  # the network the deployment is made for
    with reported():
        try:
            check_start(ogmios_url, chain)
            before = asyncio.run(tip_point(ogmios_url))
            unsigned_txs, made = deploy(
                context, payer.address, chain.network_id, notice_ms, slash_share_bps,
                refund_window_ms,
            )  # fmt: skip
        except UnchainedError as exc:  # another network's node, an unsupported Ogmios
            raise fail(str(exc), code=1) from exc
        except UNREACHABLE as exc:
            raise fail(f"cannot reach Ogmios at {ogmios_url}: {exc}", code=1) from exc
        txs = [payer.sign(unsigned) for unsigned in unsigned_txs]  # in order: each pays the next
        heights = [asyncio.run(submit_confirmed(ogmios_url, tx)) for tx in txs]
    since = before if isinstance(before, dict) else None  # "origin": a chain with no block yet
    deployment_file.save(made, deployment, chain.magic, since)
    for tx, height in zip(txs, heights, strict=True):
        fee = ada(tx.transaction_body.fee)
        typer.echo(f"deployed on {chain}: tx {tx.id} in block {height} (fee {fee})")
    typer.echo(f"escrow script {made.escrow_hash.payload.hex()}")
    typer.echo(f"settle script {made.settle_hash.payload.hex()}")
    typer.echo(f"bond script   {made.bond_hash.payload.hex()}")
    typer.echo(f"channel script {made.channel_hash.payload.hex()}")
    typer.echo(f"claim script   {made.claim_hash.payload.hex()}")
    blueprint = blueprint_path(deployment)
    blueprint.write_text(json.dumps(deployment_blueprint(made), indent=2) + "\n")
    typer.echo(f"wrote {deployment} and its CIP-57 blueprint {blueprint}")


def blueprint_path(deployment: Path) -> Path:
    """Where `deploy` publishes the deployment's blueprint: beside its file."""
    return deployment.with_name(f"{deployment.stem}.plutus.json")
