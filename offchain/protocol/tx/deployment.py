"""One deployment of the protocol on one chain: its scripts, as reference UTxOs, and their
parameters. Every builder takes it; `deploy` makes it.
"""

from __future__ import annotations

import dataclasses
import functools

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

from contracts.artifacts import (
    bond_script,
    channel_script,
    claim_script,
    escrow_script,
    settle_script,
)
from offchain.chain.context import queries
from offchain.protocol.tx.txbuild import TooBig, at_least_min_utxo, build, new_builder, out_ref

# Reference scripts sit where nobody can ever spend them (a native script "any of none" is
# never satisfied), so no one can pull a deployment out from under everyone's builders.
NEVER_SPENDABLE = ScriptAny([])


@dataclasses.dataclass(frozen=True)
class Deployment:
    """The protocol's scripts on one chain. Each script and hash is read once
    (`cached_property`): a quote needs the escrow's hash several times, and hashing a
    script serializes it."""

    network_id: int
    notice_ms: int
    slash_share_bps: int
    escrow_ref: UTxO  # holds the escrow script
    bond_ref: UTxO  # holds the bond script
    refund_window_ms: int  # after an escrow's close, only its consumer may refund (and slash)
    settle_ref: UTxO  # holds the batch settle script
    channel_ref: UTxO  # holds the payment channel script
    claim_ref: UTxO  # holds the batch channel claim script

    @property
    def network(self) -> Network:
        return Network(self.network_id)

    @functools.cached_property
    def escrow_script(self) -> PlutusV3Script:
        return _script(self.escrow_ref)

    @functools.cached_property
    def bond_script(self) -> PlutusV3Script:
        return _script(self.bond_ref)

    @functools.cached_property
    def settle_script(self) -> PlutusV3Script:
        return _script(self.settle_ref)

    @functools.cached_property
    def settle_hash(self) -> ScriptHash:
        return plutus_script_hash(self.settle_script)

    @functools.cached_property
    def escrow_hash(self) -> ScriptHash:
        return plutus_script_hash(self.escrow_script)

    @functools.cached_property
    def bond_hash(self) -> ScriptHash:
        return plutus_script_hash(self.bond_script)

    @functools.cached_property
    def channel_script(self) -> PlutusV3Script:
        return _script(self.channel_ref)

    @functools.cached_property
    def claim_script(self) -> PlutusV3Script:
        return _script(self.claim_ref)

    @functools.cached_property
    def channel_hash(self) -> ScriptHash:
        return plutus_script_hash(self.channel_script)

    @functools.cached_property
    def claim_hash(self) -> ScriptHash:
        return plutus_script_hash(self.claim_script)

    def escrow_address(self, stake: Address | None = None) -> Address:
        """An escrow address; `stake` lends its stake part (the consumer keeps delegating)."""
        return Address(self.escrow_hash, _stake_part(stake), network=self.network)

    def bond_address(self, stake: Address | None = None) -> Address:
        return Address(self.bond_hash, _stake_part(stake), network=self.network)

    def channel_address(self, stake: Address | None = None) -> Address:
        """A channel address; `stake` lends its stake part (the renter keeps delegating)."""
        return Address(self.channel_hash, _stake_part(stake), network=self.network)

    @property
    def reward_address(self) -> Address:
        """The settle script's stake address: a batch settle withdraws its whole balance (0
        unless someone paid into it) from it."""
        return Address(staking_part=self.settle_hash, network=self.network)

    @property
    def claim_reward_address(self) -> Address:
        """The claim script's stake address, withdrawn from by a batch claim as a settle is."""
        return Address(staking_part=self.claim_hash, network=self.network)


def validators(
    network_id: int,
    refund_window_ms: int,
    notice_ms: int,
    slash_share_bps: int,
    reference: bool = False,
) -> tuple[PlutusV3Script, PlutusV3Script, PlutusV3Script, PlutusV3Script, PlutusV3Script]:
    """The settle, escrow, bond, claim and channel scripts of a deployment with these
    parameters (each script names the one before it by hash, the channel its claim script);
    `reference`: the settle and claim scripts' OpShin references instead of the hand-written
    ones (tests run both)."""
    settle = settle_script(network_id, reference)
    escrow = escrow_script(plutus_script_hash(settle).payload, refund_window_ms)
    bond = bond_script(network_id, plutus_script_hash(escrow).payload, notice_ms, slash_share_bps)
    claim = claim_script(network_id, reference)
    channel = channel_script(plutus_script_hash(claim).payload)
    return settle, escrow, bond, claim, channel


def deploy(
    context: ChainContext,
    payer: Address,
    network_id: int,
    notice_ms: int,
    slash_share_bps: int,
    refund_window_ms: int,
    reference: bool = False,
) -> tuple[list[Transaction], Deployment]:
    """Publish the five scripts as reference UTxOs and register the settle and claim
    scripts' stake credentials; `payer` pays and signs each transaction, submitted in order.

    The escrow, bond, settle, channel and claim scripts are outputs 0-4 of one transaction
    when they fit the ledger's maximum size; when they do not (the OpShin references are
    larger), the channel and claim scripts go in a second transaction, paid from the first's
    change. A registration is skipped when its credential is already registered (the same
    scripts deployed again). The deployment names outputs of the unsigned transactions: their
    ids do not change when they are signed.
    """
    settle, escrow, bond, claim, channel = validators(
        network_id, refund_window_ms, notice_ms, slash_share_bps, reference
    )
    scripts = [escrow, bond, settle, channel, claim]
    network = Network(network_id)
    certificates = [
        StakeRegistration(StakeCredential(credential))
        for credential in (plutus_script_hash(settle), plutus_script_hash(claim))
        if queries(context).script_reward_balance(credential) is None
    ]
    try:
        txs = [_publish(context, payer, network, scripts, certificates, None)]
    except TooBig:
        first = _publish(context, payer, network, scripts[:3], certificates, None)
        change = UTxO(TransactionInput(first.id, 3), first.transaction_body.outputs[3])
        txs = [first, _publish(context, payer, network, scripts[3:], [], change)]
    refs = [
        UTxO(TransactionInput(tx.id, index), output)
        for tx in txs
        for index, output in enumerate(tx.transaction_body.outputs[: len(scripts)])
        if output.script is not None
    ]
    escrow_ref, bond_ref, settle_ref, channel_ref, claim_ref = refs
    return txs, Deployment(
        network_id, notice_ms, slash_share_bps, escrow_ref, bond_ref, refund_window_ms,
        settle_ref, channel_ref, claim_ref,
    )  # fmt: skip


def _publish(
    context: ChainContext,
    payer: Address,
    network: Network,
    scripts: list[PlutusV3Script],
    certificates: list[StakeRegistration],
    paid_from: UTxO | None,
) -> Transaction:
    """A transaction whose first outputs hold `scripts`, at an address nobody can spend,
    paid from `paid_from` (the change of one not on chain yet) or the payer's UTxOs."""
    holder = Address(script_hash(NEVER_SPENDABLE), network=network)
    builder = new_builder(context)
    if paid_from is None:
        builder.add_input_address(payer)
    else:
        builder.add_input(paid_from)
    for script in scripts:
        output = TransactionOutput(holder, 0, script=script)
        output.amount.coin = at_least_min_utxo(context, output, 0)
        builder.add_output(output)
    builder.certificates = list(certificates) or None
    return build(builder, payer)


def _script(ref: UTxO) -> PlutusV3Script:
    script = ref.output.script
    if not isinstance(script, PlutusV3Script):
        raise ValueError(f"{out_ref(ref)} holds no Plutus V3 script")
    return script


def _stake_part(address: Address | None) -> VerificationKeyHash | ScriptHash | None:
    return address.staking_part if address is not None else None
