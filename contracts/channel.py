"""Payment channel validator (PROTOCOL.md): one renter's deposit for one provider.

Parameter: claim_hash. A claim only asks for the claim script's withdrawal (the transaction's
one withdrawal), whose run checks every channel of the batch at once, reading only datums.
Every other action shows the channel's terms in its redeemer, checked against the datum's
hash of them. Continuing outputs keep the channel's full address and carry exactly the
datum expected, the channel's tokens (none: nothing slips in or out) and its reference script
(none: nobody raises the fees of its later spends); a top-up is the renter's, and only while
open (it spends the UTxO a provider's last claim names); a recorded time
(a close's start) is the validity *upper* bound, which cannot be backdated. Payouts to the
renter name the channel's out-ref and the action, so no output counts for two channels.
Shaped for cost like escrow.py.
"""

from opshin.prelude import *
from opshin.std.builtins import *

from contracts.onchain import *


def checked_terms(datum: ChannelDatum, terms: ChannelTerms) -> ChannelTerms:
    """The redeemer's terms, once they hash to the datum's."""
    assert blake2b_224(serialise_data(terms)) == datum.terms, "terms"
    return terms


def renter_signs(terms: ChannelTerms, signers: List[bytes]) -> bool:
    return terms.renter.payment_credential.credential_hash in signers


def provider_signs(terms: ChannelTerms, signers: List[bytes]) -> bool:
    return blake2b_224(terms.provider_vkey) in signers


def continues(tx: TxInfoV3, index: int, own: InlineTxOut, datum: Anything) -> int:
    """The lovelace of output `index`, which continues the channel: its address, the inline
    `datum`, and the channel's tokens."""
    out: InlineTxOut = index_access_list(un_list_data(tx.outputs), index)
    assert out.address == own.address, "continuing address"
    assert equals_data(out.datum, datum), "continuing datum"
    assert map_data(tokens(out.value)) == map_data(tokens(own.value)), "continuing tokens"
    assert equals_data(out.reference_script, own.reference_script), "continuing reference script"
    return lovelace(out.value)


def pays_renter(tx: TxInfoV3, own: InputV3, index: int, kind: int, terms: ChannelTerms) -> None:
    """Output `index` gives the renter the whole channel, tagged with its out-ref and `kind`."""
    out: InlineTxOut = index_access_list(un_list_data(tx.outputs), index)
    assert out.address == terms.renter, "payout address"
    assert lovelace(out.value) >= lovelace(own.resolved.value), "payout amount"
    assert out.datum == SomeOutputDatum(Payout(kind, own.out_ref)), "payout tag"


def validator(claim_hash: bytes, context: ScriptContextV3) -> None:
    purpose = context.purpose
    assert isinstance(purpose, SpendingScript), "purpose"
    tx = context.transaction
    redeemer: ChannelRedeemer = context.redeemer
    if isinstance(redeemer, ChannelClaim):
        # the claim script refuses a transaction with any other withdrawal
        withdrawals = un_map_data(tx.withdrawals)
        assert not null_list(withdrawals) and equals_data(
            fst_pair(head_list(withdrawals)), ScriptCredential(claim_hash)
        ), "claim needs the batch withdrawal"
    elif isinstance(redeemer, MutualClose):
        mutual: ChannelDatum = purpose.datum.datum
        terms = checked_terms(mutual, redeemer.terms)
        signers = tx.signatories
        assert renter_signs(terms, signers) and provider_signs(terms, signers), "both sign"
    else:
        own: InputV3 = head_list(skip_list(un_list_data(tx.inputs), redeemer.own_input))
        assert own.out_ref == purpose.tx_out_ref, "own_input is not the spent channel"
        datum: ChannelDatum = purpose.datum.datum
        locked = lovelace(own.resolved.value)
        if isinstance(redeemer, ChannelTopUp):
            # a top-up spends the channel UTxO: a stranger's, or the renter's once closing,
            # would void the provider's pending (last) claim
            terms = checked_terms(datum, redeemer.terms)
            assert renter_signs(terms, tx.signatories), "renter signs"
            assert datum.closing_at == -1, "already closing"
            added = continues(tx, redeemer.output, own.resolved, own.resolved.datum)
            assert added > locked, "top up adds"
        elif isinstance(redeemer, StartClose):
            terms = checked_terms(datum, redeemer.terms)
            assert renter_signs(terms, tx.signatories), "renter signs"
            assert datum.closing_at == -1, "already closing"
            upper = tx.validity_range.upper_bound.limit
            assert isinstance(upper, FinitePOSIXTime), "needs a finite upper bound"
            closing = ChannelDatum(
                datum.renter_vkey, datum.payee, datum.terms, datum.claimed,
                upper.time + terms.close_period_ms,
            )  # fmt: skip
            kept = continues(tx, redeemer.output, own.resolved, SomeOutputDatum(closing))
            assert kept == locked, "close keeps the deposit"
        elif isinstance(redeemer, Drain):
            terms = checked_terms(datum, redeemer.terms)
            assert datum.closing_at >= 0, "not closing"
            lower = tx.validity_range.lower_bound.limit
            assert isinstance(lower, FinitePOSIXTime), "needs a finite lower bound"
            assert lower.time > datum.closing_at, "close period not over"
            pays_renter(tx, own, redeemer.renter_output, 3, terms)
        else:
            assert isinstance(redeemer, ProviderEnd), "redeemer"
            terms = checked_terms(datum, redeemer.terms)
            assert provider_signs(terms, tx.signatories), "provider signs"
            pays_renter(tx, own, redeemer.renter_output, 4, terms)
