"""One deployment of the protocol on one chain: its scripts, as reference UTxOs, and their
parameters. Every builder takes it; `deploy` makes it.
"""

from __future__ import annotations

import dataclasses

from pycardano import (
    Address,
    ChainContext,
    Network,
    PlutusV3Script,
    ScriptAny,
    ScriptHash,
    StakeCredential,
    StakeRegistration,
    Transaction,
    TransactionInput,
    TransactionOutput,
    UTxO,
    VerificationKeyHash,
    plutus_script_hash,
    script_hash,
)

from contracts.artifacts import bond_script, escrow_script, settle_script
from offchain.chain.context import queries
from offchain.protocol.txbuild import at_least_min_utxo, build, new_builder, out_ref

# Reference scripts sit where nobody can ever spend them (a native script "any of none" is
# never satisfied), so no one can pull a deployment out from under everyone's builders.
NEVER_SPENDABLE = ScriptAny([])


@dataclasses.dataclass(frozen=True)
class Deployment:
    network_id: int
    notice_ms: int
    slash_share_bps: int
    escrow_ref: UTxO  # holds the escrow script
    bond_ref: UTxO  # holds the bond script
    refund_window_ms: int  # after an escrow's close, only its consumer may refund (and slash)
    settle_ref: UTxO  # holds the batch settle script

    @property
    def network(self) -> Network:
        return Network(self.network_id)

    @property
    def escrow_script(self) -> PlutusV3Script:
        return _script(self.escrow_ref)

    @property
    def bond_script(self) -> PlutusV3Script:
        return _script(self.bond_ref)

    @property
    def settle_script(self) -> PlutusV3Script:
        return _script(self.settle_ref)

    @property
    def settle_hash(self) -> ScriptHash:
        return plutus_script_hash(self.settle_script)

    @property
    def escrow_hash(self) -> ScriptHash:
        return plutus_script_hash(self.escrow_script)

    @property
    def bond_hash(self) -> ScriptHash:
        return plutus_script_hash(self.bond_script)

    def escrow_address(self, stake: Address | None = None) -> Address:
        """An escrow address; `stake` lends its stake part (the consumer keeps delegating)."""
        return Address(self.escrow_hash, _stake_part(stake), network=self.network)

    def bond_address(self, stake: Address | None = None) -> Address:
        return Address(self.bond_hash, _stake_part(stake), network=self.network)

    @property
    def reward_address(self) -> Address:
        """The settle script's stake address: a batch settle withdraws its whole balance (0
        unless someone paid into it) from it."""
        return Address(staking_part=self.settle_hash, network=self.network)


def validators(
    network_id: int,
    refund_window_ms: int,
    notice_ms: int,
    slash_share_bps: int,
    reference: bool = False,
) -> tuple[PlutusV3Script, PlutusV3Script, PlutusV3Script]:
    """The settle, escrow and bond scripts of a deployment with these parameters (each
    script names the one before it by hash); `reference`: the settle script's OpShin
    reference instead of the hand-written one (tests run both)."""
    settle = settle_script(network_id, reference)
    escrow = escrow_script(plutus_script_hash(settle).payload, refund_window_ms)
    bond = bond_script(network_id, plutus_script_hash(escrow).payload, notice_ms, slash_share_bps)
    return settle, escrow, bond


def deploy(
    context: ChainContext,
    payer: Address,
    network_id: int,
    notice_ms: int,
    slash_share_bps: int,
    refund_window_ms: int,
    reference: bool = False,
) -> tuple[Transaction, Deployment]:
    """Publish the three scripts as reference UTxOs and register the settle script's stake
    credential; `payer` pays and signs.

    The escrow is output 0, the bond output 1 and the settle script output 2. Registration is
    skipped when the credential is already registered (the same scripts deployed again). The
    deployment names outputs of the unsigned transaction: its id does not change when it is
    signed.
    """
    settle, escrow, bond = validators(
        network_id, refund_window_ms, notice_ms, slash_share_bps, reference
    )
    settle_hash = plutus_script_hash(settle)
    holder = Address(script_hash(NEVER_SPENDABLE), network=Network(network_id))
    builder = new_builder(context)
    builder.add_input_address(payer)
    outputs = []
    for script in (escrow, bond, settle):
        output = TransactionOutput(holder, 0, script=script)
        output.amount.coin = at_least_min_utxo(context, output, 0)
        builder.add_output(output)
        outputs.append(output)
    if queries(context).script_reward_balance(settle_hash) is None:
        builder.certificates = [StakeRegistration(StakeCredential(settle_hash))]
    tx = build(builder, payer)
    refs = [UTxO(TransactionInput(tx.id, i), out) for i, out in enumerate(outputs)]
    escrow_ref, bond_ref, settle_ref = refs
    return tx, Deployment(
        network_id, notice_ms, slash_share_bps, escrow_ref, bond_ref, refund_window_ms,
        settle_ref,
    )  # fmt: skip


def _script(ref: UTxO) -> PlutusV3Script:
    script = ref.output.script
    if not isinstance(script, PlutusV3Script):
        raise ValueError(f"{out_ref(ref)} holds no Plutus V3 script")
    return script


def _stake_part(address: Address | None) -> VerificationKeyHash | ScriptHash | None:
    return address.staking_part if address is not None else None
