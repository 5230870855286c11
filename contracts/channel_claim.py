"""Batch channel claim (PROTOCOL.md): a withdraw-zero that checks every channel input at once.

Parameter: network_id. The channel's ChannelClaim spend only asks for this script's
withdrawal; this run walks the inputs once, in ledger order, pairing the i-th channel (every
script input, all of one script: the channel script whose hash the IOUs sign) with output
`first_continuing + i`, its continuing output, and with `payees[i]` and `signatures[i]`. The
continuing datum names the IOU's amount (its `claimed`), so the redeemer does not repeat it;
the provider takes `amount - claimed`. Each provider output (those before first_continuing)
must hold the sum of what its channels pay, and its address must hash to each of those
channels' `payee`. No other Plutus script runs (one redeemer per channel input and this
one), so nothing else can count an output.

OpShin tuples hold Data: the builtin lists the walk carries are wrapped in list Data there.
"""

from typing import Tuple

from opshin.prelude import *
from opshin.std.builtins import *

from contracts.onchain import *


def payees(outputs: Anything, n: int, nothing: Anything) -> Anything:
    """[B payee hash, I 0] (list Data) for each of the first n outputs, the provider outputs."""
    if n == 0:
        return nothing
    payee = b_data(blake2b_224(serialise_data(head_list(fields(head_list(outputs))))))
    acc = list_data(mk_cons(payee, mk_cons(i_data(0), nothing)))
    return mk_cons(acc, payees(tail_list(outputs), n - 1, nothing))


def claim_channels(
    inputs: Anything,
    continuing: Anything,
    payee_list: Anything,
    signatures: Anything,
    redeemers: Anything,
    paid: Anything,
    script: ScriptCredential,
    latest: int,
    network_id: int,
) -> Tuple[Anything, Anything, Anything, Anything]:
    """Walk the inputs from `inputs` on, each channel taking the next continuing output,
    payee, signature and redeemer. Returns what is left of the payees, signatures and
    redeemers, and the payouts' accumulators."""
    if null_list(inputs):
        return (list_data(payee_list), list_data(signatures), map_data(redeemers), list_data(paid))
    channel: InputV3 = head_list(inputs)
    if isinstance(channel.resolved.address.payment_credential, PubKeyCredential):
        return claim_channels(
            tail_list(inputs), continuing, payee_list, signatures, redeemers, paid, script,
            latest, network_id,
        )  # fmt: skip
    own = channel.resolved
    assert equals_data(own.address.payment_credential, script), "one channel script"
    datum: ChannelDatum = own.datum.datum
    out: InlineTxOut = head_list(continuing)
    # an inline datum, not a hash or none (read as one, those fail untraced); checked before
    # the address, as the deployed version reads it first
    kind: OutputDatum = head_list(tail_list(tail_list(fields(head_list(continuing)))))
    assert isinstance(kind, SomeOutputDatum), "continuing datum"
    assert out.address == own.address, "continuing address"
    now: ChannelDatum = out.datum.datum
    amount = now.claimed
    claimed = ChannelDatum(datum.renter_vkey, datum.payee, datum.terms, amount, datum.closing_at)
    assert out.datum == SomeOutputDatum(claimed), "continuing datum"
    assert amount > datum.claimed, "stale IOU"
    take = amount - datum.claimed
    held = lovelace(own.value)
    assert take <= held, "claim above the deposit"
    assert lovelace(out.value) == held - take and map_data(tokens(out.value)) == map_data(
        tokens(own.value)
    ), "continuing value"
    assert equals_data(out.reference_script, own.reference_script), "continuing reference script"
    assert datum.closing_at < 0 or latest <= datum.closing_at, "claim after close"
    iou = Iou(b"UNCHAINED/iou/v1", network_id, script.credential_hash, datum.terms, amount)
    assert verify_ed25519_signature(
        datum.renter_vkey, serialise_data(iou), un_b_data(head_list(signatures))
    ), "iou signature"
    payee = un_i_data(head_list(payee_list))
    assert payee >= 0, "one provider per payout"  # add_payout reads any p <= 0 as 0
    paid = add_payout(paid, payee, b_data(datum.payee), take)
    return claim_channels(
        tail_list(inputs), tail_list(continuing), tail_list(payee_list), tail_list(signatures),
        tail_list(redeemers), paid, script, latest, network_id,
    )  # fmt: skip


def validator(network_id: int, context: BatchContext) -> None:
    purpose = context.purpose
    assert isinstance(purpose, RewardingScript), "purpose"
    tx = context.transaction
    latest = batch_upper_bound(tx)
    batch: BatchClaim = context.redeemer
    parts = fields(context.redeemer)
    payee_list = un_list_data(head_list(parts))
    assert not null_list(payee_list), "empty batch"
    nothing = tail_list(tail_list(tail_list(parts)))  # the empty list
    outputs = un_list_data(tx.outputs)
    inputs = un_list_data(tx.inputs)
    script: ScriptCredential = first_script(inputs)
    payees_left, signatures_left, redeemers, paid = claim_channels(
        inputs,
        drop_list(outputs, batch.first_continuing),
        payee_list,
        un_list_data(head_list(tail_list(parts))),
        un_map_data(tx.redeemers),
        payees(outputs, batch.first_continuing, nothing),
        script,
        latest,
        network_id,
    )
    assert (
        null_list(un_list_data(payees_left))
        and null_list(un_list_data(signatures_left))
        and null_list(tail_list(un_map_data(redeemers)))
    ), "one payee and signature per channel, and no script but channels and this withdrawal"
    check_payouts(outputs, un_list_data(paid))
