"""A protocol deployment as a JSON file: what the deploy step writes and every later command
reads, so the provider, consumer and market all build against the same reference scripts.

The file names the reference UTxOs and the parameters; the scripts themselves are read back
from the chain, so a file from another chain (a fresh devnet) is refused, as is one whose
scripts are not the validators this version of Unchained builds transactions for. The chain
and the validators are imported by `load` and `save`; a renter signing IOUs reads the file's
network and channel script alone (`offchain.protocol.tx.deployment_channel`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, ValidationError

from offchain.protocol.tx.deployment_channel import DeploymentFileError

if TYPE_CHECKING:
    from pycardano import ChainContext

    from offchain.protocol.tx.deployment import Deployment


REFS = ("escrow_ref", "bond_ref", "settle_ref", "channel_ref", "claim_ref")


class DeploymentFile(BaseModel):
    """The file's fields; the script hashes are there for people and are checked on load."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    network_id: int
    notice_ms: int
    slash_share_bps: int
    refund_window_ms: int
    escrow_ref: str  # TXID#IX of the UTxO holding the escrow script
    bond_ref: str
    settle_ref: str
    channel_ref: str
    claim_ref: str
    escrow_hash: str
    bond_hash: str
    settle_hash: str
    channel_hash: str
    claim_hash: str
    # Written by `unchained deploy` (older files lack them): the network's magic, which tells
    # test networks apart where the id cannot, and a chain point {"slot", "id"} before the
    # deployment's transaction, from where chain-sync reaches it in a few blocks (the start-up
    # check that Ogmios sends transactions' CBOR reads it there).
    network_magic: int | None = None
    published_after: dict[str, int | str] | None = None


def save(
    deployment: Deployment,
    path: Path,
    network_magic: int | None = None,
    published_after: dict[str, int | str] | None = None,
) -> None:
    from offchain.protocol.tx.txbuild import out_ref

    record = DeploymentFile(
        network_magic=network_magic,
        published_after=published_after,
        network_id=deployment.network_id,
        notice_ms=deployment.notice_ms,
        slash_share_bps=deployment.slash_share_bps,
        refund_window_ms=deployment.refund_window_ms,
        escrow_ref=out_ref(deployment.escrow_ref),
        bond_ref=out_ref(deployment.bond_ref),
        settle_ref=out_ref(deployment.settle_ref),
        channel_ref=out_ref(deployment.channel_ref),
        claim_ref=out_ref(deployment.claim_ref),
        escrow_hash=deployment.escrow_hash.payload.hex(),
        bond_hash=deployment.bond_hash.payload.hex(),
        settle_hash=deployment.settle_hash.payload.hex(),
        channel_hash=deployment.channel_hash.payload.hex(),
        claim_hash=deployment.claim_hash.payload.hex(),
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(record.model_dump_json(indent=2) + "\n")


def load(path: Path, context: ChainContext) -> Deployment:
    """The deployment at `path`, its reference scripts read from the chain behind `context`."""
    from offchain.chain.context import queries
    from offchain.chain.utxo import parse_out_ref, utxo_at
    from offchain.protocol.tx.deployment import Deployment

    record = read_record(path)
    if record.network_magic is not None:
        _check_network(record, path, context)
    refs = []
    for name in REFS:
        text = getattr(record, name)
        try:
            utxo = utxo_at(queries(context), parse_out_ref(text))
        except ValueError as exc:
            raise DeploymentFileError(f"{path}: {name}: {exc}") from exc
        if utxo is None:
            raise DeploymentFileError(
                f"{path}: {name} {text} is not on this chain (another chain or a fresh devnet?):"
                " deploy again"
            )
        refs.append(utxo)
    try:
        escrow_ref, bond_ref, settle_ref, channel_ref, claim_ref = refs
        deployment = Deployment(
            record.network_id, record.notice_ms, record.slash_share_bps, escrow_ref, bond_ref,
            record.refund_window_ms, settle_ref, channel_ref, claim_ref,
        )  # fmt: skip
        _check_scripts(deployment, record)
    except ValueError as exc:
        raise DeploymentFileError(f"{path}: {exc}") from exc
    return deployment


def read_record(path: Path) -> DeploymentFile:
    """The file's fields as written, not checked against any chain (a start-up check reads
    its network and its chain point before it connects)."""
    try:
        return DeploymentFile.model_validate_json(path.read_text())
    except FileNotFoundError as exc:
        raise DeploymentFileError(
            f"no deployment file at {path}: deploy the contracts first (or pass --deployment)"
        ) from exc
    except ValidationError as exc:
        from offchain.protocol.job.jobspec import describe

        raise DeploymentFileError(f"{path}:\n{describe(exc)}") from exc


def _check_network(record: DeploymentFile, path: Path, context: ChainContext) -> None:
    """The chain behind `context` is the network the file was deployed on."""
    from offchain.chain.network import ChainNetwork, NetworkMismatch, check_deployment

    chain = ChainNetwork(context.genesis_param.network_magic)
    try:
        check_deployment(chain, record.network_id, record.network_magic, path, "this chain is")
    except NetworkMismatch as exc:
        raise DeploymentFileError(str(exc)) from exc


def _check_scripts(deployment: Deployment, record: DeploymentFile) -> None:
    """The chain holds the scripts the file names, and they are this version's validators."""
    from pycardano import plutus_script_hash

    from offchain.protocol.tx.deployment import validators

    hashes = (
        deployment.settle_hash, deployment.escrow_hash, deployment.bond_hash,
        deployment.claim_hash, deployment.channel_hash,
    )  # fmt: skip
    if tuple(h.payload.hex() for h in hashes) != (
        record.settle_hash,
        record.escrow_hash,
        record.bond_hash,
        record.claim_hash,
        record.channel_hash,
    ):
        raise ValueError("the scripts on chain do not have the hashes the file names")
    built = [
        validators(
            deployment.network_id,
            deployment.refund_window_ms,
            deployment.notice_ms,
            deployment.slash_share_bps,
            reference,
        )
        for reference in (False, True)
    ]
    if all(tuple(plutus_script_hash(s) for s in scripts) != hashes for scripts in built):
        raise ValueError(
            "its validators are not the ones this version of Unchained builds for its "
            "parameters: deploy again"
        )
