"""Provider bond (PROTOCOL.md): top up, unbond with notice, withdraw, or be slashed.

Parameters: network_id, escrow_hash, notice_ms, slash_share_bps. A slash needs the escrow
refunded in the same transaction and the provider's signed Acceptance of that escrow naming
this bond script. The notice starts at the validity *upper* bound: the submitter picks both
bounds, but only the upper one must lie in the future for the ledger to take the transaction.
The bond is owned by the key of its datum's `provider` address (the provider's payout
address, a cold wallet's or the provider key's own): only the owner may begin unbonding or
withdraw, so the provider key (hot: it lives on the daemon's machine) cannot take the bond
away. A top-up needs the provider key's signature (the daemon may top up: a top-up only adds;
a stranger's would spend the bond UTxO a consumer's slash names). Continuing outputs keep the
bond's address, tokens and reference script. Shaped for cost like escrow.py: small functions,
`assert`s over values, lists read by index.
"""

from opshin.prelude import *
from opshin.std.builtins import *

from contracts.onchain import *


def continuing(tx: TxInfoV3, index: int, own: InlineTxOut, datum: SomeOutputDatum) -> int:
    """The lovelace of output `index`, which must sit at the bond's address with `datum` and
    exactly the bond's native tokens (nobody moves tokens out of a bond, or dusts it)."""
    out: InlineTxOut = index_access_list(un_list_data(tx.outputs), index)
    assert out.address == own.address, "continuing output address"
    assert out.datum == datum, "continuing output datum"
    assert map_data(tokens(out.value)) == map_data(tokens(own.value)), "continuing tokens"
    assert equals_data(out.reference_script, own.reference_script), "continuing reference script"
    return lovelace(out.value)


def lower_bound(tx: TxInfoV3) -> int:
    lower = tx.validity_range.lower_bound.limit
    assert isinstance(lower, FinitePOSIXTime), "needs a finite lower bound"
    return lower.time


def upper_bound(tx: TxInfoV3) -> int:
    """A time the transaction is included before: the one bound a submitter cannot backdate."""
    upper = tx.validity_range.upper_bound.limit
    assert isinstance(upper, FinitePOSIXTime), "needs a finite upper bound"
    return upper.time


def slash(
    network_id: int,
    escrow_hash: bytes,
    share: int,
    tx: TxInfoV3,
    own_ref: TxOutRef,
    bond_hash: bytes,
    datum: BondDatum,
    redeemer: Slash,
):
    """The refunded escrow's consumer is owed `share`, if the provider accepted that job
    backed by this bond script."""
    escrow: InputV3 = index_access_list(un_list_data(tx.inputs), redeemer.escrow_input)
    ref = escrow.out_ref
    address = escrow.resolved.address
    assert address.payment_credential == ScriptCredential(escrow_hash), "not an escrow"
    escrow_redeemer: EscrowRedeemer = tx.redeemers[Spending(ref)]
    assert isinstance(escrow_redeemer, Refund), "the escrow must be refunded"
    job: EscrowDatum = escrow.resolved.datum.datum
    vkey = datum.provider_vkey
    assert job.provider_vkey == vkey, "another provider's escrow"
    acceptance = Acceptance(
        b"UNCHAINED/accept/v1", network_id, escrow_hash, ref, job.job_id, bond_hash
    )
    assert verify_ed25519_signature(
        vkey, serialise_data(acceptance), redeemer.acceptance_signature
    ), "acceptance signature"
    victim: InlineTxOut = index_access_list(un_list_data(tx.outputs), redeemer.consumer_output)
    assert victim.address == job.consumer, "victim address"
    assert lovelace(victim.value) >= share, "victim share"
    assert victim.datum == SomeOutputDatum(SlashPayout(ref, own_ref)), "victim tag"


def validator(
    network_id: int,
    escrow_hash: bytes,
    notice_ms: int,
    slash_share_bps: int,
    context: ScriptContextV3,
) -> None:
    purpose = context.purpose
    assert isinstance(purpose, SpendingScript), "purpose"
    tx = context.transaction
    own_ref = purpose.tx_out_ref
    inputs: List[InputV3] = tx.inputs
    own = [i.resolved for i in inputs if i.out_ref == own_ref][0]
    bond = own.address.payment_credential
    assert len([i for i in inputs if i.resolved.address.payment_credential == bond]) == 1, (
        "one bond per transaction"
    )
    datum: BondDatum = purpose.datum.datum
    locked = lovelace(own.value)
    redeemer: BondRedeemer = context.redeemer
    if isinstance(redeemer, Slash):
        share = locked * slash_share_bps // 10000
        bond_hash = bond.credential_hash
        slash(network_id, escrow_hash, share, tx, own_ref, bond_hash, datum, redeemer)
        kept = continuing(tx, redeemer.bond_output, own, own.datum)
        assert kept >= locked - share, "slash takes at most the share"
    elif isinstance(redeemer, TopUp):
        # the provider key: a stranger's top-up would spend the bond UTxO a slash names
        assert blake2b_224(datum.provider_vkey) in tx.signatories, "provider must sign"
        assert continuing(tx, redeemer.bond_output, own, own.datum) > locked, "top up adds"
    else:
        owner = datum.provider.payment_credential
        assert isinstance(owner, PubKeyCredential), "owner must be a key"
        assert owner.credential_hash in tx.signatories, "owner must sign"
        if isinstance(redeemer, BeginUnbond):
            unbonding = BondDatum(datum.provider, datum.provider_vkey, BoxedInt(upper_bound(tx)))
            kept = continuing(tx, redeemer.bond_output, own, SomeOutputDatum(unbonding))
            assert kept >= locked, "unbonding keeps the bond"
        else:
            assert isinstance(redeemer, Withdraw), "redeemer"
            since = datum.unbonding_since
            assert isinstance(since, BoxedInt), "not unbonding"
            assert lower_bound(tx) >= since.value + notice_ms, "notice not over"
