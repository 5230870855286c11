"""Provider bond (PROTOCOL.md): top up, unbond with notice, withdraw, or be slashed.

Parameters: network_id, escrow_hash, notice_ms, slash_share_bps. A slash needs the escrow
refunded in the same transaction and the provider's signed Acceptance of that escrow.
"""

from opshin.prelude import *
from opshin.std.builtins import *

from contracts.onchain import *

ACCEPT_DOMAIN = b"UNCHAINED/accept/v1"


def lovelace(out: TxOut) -> int:
    return out.value[b""][b""]


def inline_datum(out: TxOut) -> Anything:
    datum = out.datum
    assert isinstance(datum, SomeOutputDatum), "inline datum required"
    return datum.datum


def continuing(tx: TxInfoV3, index: int, own: TxOut, datum: OutputDatum) -> int:
    """The lovelace of output `index`, which must sit at the bond's address with `datum`."""
    out = tx.outputs[index]
    assert out.address == own.address, "continuing output address"
    assert out.datum == datum, "continuing output datum"
    return lovelace(out)


def lower_bound(tx: TxInfoV3) -> int:
    lower = tx.validity_range.lower_bound.limit
    assert isinstance(lower, FinitePOSIXTime), "needs a finite lower bound"
    return lower.time


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
    own = [i.resolved for i in tx.inputs if i.out_ref == own_ref][0]
    own_credential = own.address.payment_credential
    bonds = [i for i in tx.inputs if i.resolved.address.payment_credential == own_credential]
    assert len(bonds) == 1, "one bond per transaction"
    datum: BondDatum = purpose.datum.datum
    locked = lovelace(own)
    provider_key_hash = blake2b_224(datum.provider_vkey)
    redeemer: BondRedeemer = context.redeemer
    if isinstance(redeemer, TopUp):
        kept = continuing(tx, redeemer.bond_output, own, own.datum)
        assert kept > locked, "top up must add lovelace"
    elif isinstance(redeemer, BeginUnbond):
        assert provider_key_hash in tx.signatories, "provider must sign"
        unbonding = BondDatum(datum.provider, datum.provider_vkey, BoxedInt(lower_bound(tx)))
        kept = continuing(tx, redeemer.bond_output, own, SomeOutputDatum(unbonding))
        assert kept >= locked, "unbonding keeps the bond"
    elif isinstance(redeemer, Withdraw):
        assert provider_key_hash in tx.signatories, "provider must sign"
        since = datum.unbonding_since
        assert isinstance(since, BoxedInt), "not unbonding"
        assert lower_bound(tx) >= since.value + notice_ms, "notice not over"
    elif isinstance(redeemer, Slash):
        escrow = tx.inputs[redeemer.escrow_input]
        escrow_ref = escrow.out_ref
        assert escrow.resolved.address.payment_credential == ScriptCredential(escrow_hash), "escrow"
        escrow_redeemer: EscrowRedeemer = tx.redeemers[Spending(escrow_ref)]
        assert isinstance(escrow_redeemer, Refund), "the escrow must be refunded"
        escrow_datum: EscrowDatum = inline_datum(escrow.resolved)
        assert escrow_datum.provider_vkey == datum.provider_vkey, "another provider's escrow"
        acceptance = Acceptance(
            ACCEPT_DOMAIN, network_id, escrow_hash, escrow_ref, escrow_datum.job_id
        )
        assert verify_ed25519_signature(
            datum.provider_vkey, serialise_data(acceptance), redeemer.acceptance_signature
        ), "acceptance signature"
        share = locked * slash_share_bps // 10000
        victim = tx.outputs[redeemer.consumer_output]
        assert victim.address == escrow_datum.consumer, "victim address"
        assert lovelace(victim) >= share, "victim share"
        assert victim.datum == SomeOutputDatum(Payout(3, escrow_ref)), "victim tag"
        kept = continuing(tx, redeemer.bond_output, own, own.datum)
        assert kept >= locked - share, "slash takes at most the share"
    else:
        assert False, "redeemer"
