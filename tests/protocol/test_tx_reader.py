"""`TxReader` on transactions the protocol's own builders make on the devnet: each spend
redeemer found by its input in ledger order (also when the body lists its inputs in another
order) and read as the escrow's or the bond's, the settle script's withdraw redeemer and the
units it settled per escrow, inline datums and payout tags. Every transaction is read as built
(protocol types) and as read back from its CBOR (raw Plutus data, as the market's follower and
the provider's watcher see it)."""

from __future__ import annotations

import copy
from collections.abc import Iterator

from pycardano import (
    Address,
    Network,
    RedeemerTag,
    ScriptHash,
    Transaction,
    TransactionBody,
    TransactionId,
    TransactionInput,
    TransactionWitnessSet,
    VerificationKeyHash,
    Withdrawals,
)

from devnet.genesis import ADA
from offchain.chain.utxo import utxo_at
from offchain.protocol.ledger.claim import Claim
from offchain.protocol.ledger.types import (
    BatchSettle,
    BondDatum,
    Cancel,
    Payout,
    PayoutKind,
    Refund,
    Settle,
    Slash,
    SlashPayout,
    TopUp,
    TxOutRef,
)
from offchain.protocol.tx import batch
from offchain.protocol.tx import bond as bonds
from offchain.protocol.tx import escrow as escrows
from offchain.protocol.tx.tx_reader import Script, ScriptHashes, TxReader, datum_as, inline_datum
from tests.protocol.onchain import (
    EVIDENCE,
    OWED,
    PRICE,
    RESULT,
    accept,
    lock,
    post_bond,
    to_settle,
    travel_to,
    wallet,
)

UNITS = 1_000  # 2 ADA at PRICE: above the min-UTxO


def as_built_and_from_cbor(tx: Transaction) -> Iterator[TxReader]:
    yield TxReader(tx)
    yield TxReader(Transaction.from_cbor(tx.to_cbor()))


def tag(kind: PayoutKind, escrow: TransactionInput) -> Payout:
    return Payout(int(kind), TxOutRef.of(escrow))


async def test_a_batch_settle_is_read_by_ledger_order_whatever_order_its_body_lists(
    devnet, deployment
):
    """Two receipts and a claim on two more escrows, of two providers (one payout each,
    whatever signed): `settled` pairs each escrow with its item's units."""
    consumer, provider, other = [await wallet(devnet) for _ in range(3)]
    locked = [await lock(devnet, deployment, consumer, p) for p in (provider, provider, other)]
    claimed = [await lock(devnet, deployment, consumer, other) for _ in range(2)]
    units = [UNITS, 0, 2 * UNITS]
    receipts = [
        to_settle(deployment, p.key, escrow, n, RESULT, EVIDENCE)
        for escrow, n, p in zip(locked, units, (provider, provider, other), strict=True)
    ]
    claim = Claim.sign(
        other.key, 0, deployment.settle_hash, {claimed[0].input: 7, claimed[1].input: UNITS}
    )
    built = batch.settle(
        devnet.context(), deployment, receipts, provider.address, claims=[(claimed, claim)]
    )
    body = copy.copy(built.transaction_body)
    ledger = sorted(body.inputs, key=lambda ref: (ref.transaction_id.payload, ref.index))
    body.inputs = list(reversed(ledger))  # the escrows' redeemers still index `ledger`
    escrows = [*locked, *claimed]
    assert len(ledger) > len(escrows) and list(body.inputs) != ledger
    reordered = Transaction(body, built.transaction_witness_set)

    for read in as_built_and_from_cbor(reordered):
        assert read.inputs == ledger
        for escrow in escrows:
            assert read.spend(escrow.input, Script.ESCROW) == Settle()
        fee = [ref for ref in ledger if ref not in {e.input for e in escrows}]
        assert all(read.spend(ref, Script.ESCROW) is None for ref in fee)  # key inputs
        nowhere = TransactionInput(TransactionId(bytes(32)), 0)
        assert read.spend(nowhere, Script.ESCROW) is None

        [(account, _)] = read.withdrawals
        assert account == bytes(deployment.reward_address)
        assert ScriptHashes.of(deployment).rewarding(account) is Script.SETTLE
        [withdraw] = [r for r in read.redeemers if r.purpose == RedeemerTag.WITHDRAWAL]
        settling = withdraw.read(Script.SETTLE)
        assert isinstance(settling, BatchSettle) and withdraw.index == 0
        assert withdraw.read(Script.ESCROW) is None
        assert read.settled == {
            **{e.input: n for e, n in zip(locked, units, strict=True)},
            claimed[0].input: 7,
            claimed[1].input: UNITS,
        }
        assert read.tags == {} and read.slashed() == set()  # settle payouts carry no datum
        paid = [o.amount.coin for o in read.tx.transaction_body.outputs[:2]]  # one a provider
        assert sorted(paid) == [PRICE * UNITS, PRICE * (7 + 3 * UNITS)]


def test_withdrawals_are_read_in_ledger_order_scripts_first():
    """The ledger orders reward accounts by credential, scripts before keys (what withdraw
    redeemers index); their bytes put keys (header 0xe0) first."""
    script = Address(staking_part=ScriptHash(b"\xff" * 28), network=Network.TESTNET)
    key = Address(staking_part=VerificationKeyHash(b"\x00" * 28), network=Network.TESTNET)
    body = TransactionBody(
        inputs=[TransactionInput(TransactionId(bytes(32)), 0)], outputs=[], fee=0,
        withdraws=Withdrawals({bytes(key): 1, bytes(script): 0}),
    )  # fmt: skip
    read = TxReader(Transaction(body, TransactionWitnessSet()))
    assert read.withdrawals == [(bytes(script), 0), (bytes(key), 1)]


async def test_cancel_top_up_and_slash_are_read_as_their_scripts_with_their_datums(
    devnet, deployment
):
    consumer, provider = await wallet(devnet), await wallet(devnet)
    bond = await post_bond(devnet, deployment, provider)
    escrow = await lock(devnet, deployment, consumer, provider)
    context = devnet.context()
    scripts = ScriptHashes.of(deployment)

    datum = escrows.escrow_datum(deployment, escrow)
    for output in (escrow.output, utxo_at(context, escrow.input).output):  # built, on chain
        raw = inline_datum(output)
        assert scripts.at(output.address) is Script.ESCROW
        assert datum_as(raw, Script.ESCROW) == datum
        assert datum_as(raw, Script.BOND) is None and datum_as(raw, None) is None
    on_chain = utxo_at(context, bond.input).output
    assert scripts.at(on_chain.address) is Script.BOND
    assert isinstance(datum_as(inline_datum(on_chain), Script.BOND), BondDatum)
    assert scripts.at(consumer.address) is None

    cancel = escrows.cancel(context, deployment, escrow, consumer.address)
    for read in as_built_and_from_cbor(cancel):
        redeemer = read.spend(escrow.input, Script.ESCROW)
        assert isinstance(redeemer, Cancel) and read.inputs[redeemer.own_input] == escrow.input
        assert read.tags[redeemer.consumer_output] == tag(PayoutKind.CANCEL, escrow.input)
        paid = read.tx.transaction_body.outputs[redeemer.consumer_output]
        assert (paid.address, paid.amount.coin) == (consumer.address, OWED)
        assert read.settled == {}

    top_up = bonds.top_up(context, deployment, bond, provider.address, 10 * ADA)
    for read in as_built_and_from_cbor(top_up):
        assert read.spend(bond.input, Script.BOND) == TopUp(bonds.BOND_OUTPUT)
        assert read.tags == {} and read.slashed() == set() and read.settled == {}

    await travel_to(devnet, datum.close + 1)  # within the refund window: the consumer slashes
    acceptance = accept(deployment, provider.key, escrow)
    slash = bonds.slash(devnet.context(), deployment, escrow, bond, acceptance, consumer.address)
    for read in as_built_and_from_cbor(slash):
        refund = read.spend(escrow.input, Script.ESCROW)
        assert isinstance(refund, Refund) and read.inputs[refund.own_input] == escrow.input
        assert read.tags[refund.consumer_output] == tag(PayoutKind.REFUND, escrow.input)
        taken = read.spend(bond.input, Script.BOND)
        assert isinstance(taken, Slash) and taken.escrow_input == refund.own_input
        assert read.tags[taken.consumer_output] == SlashPayout(
            TxOutRef.of(escrow.input), TxOutRef.of(bond.input)
        )
        going_on = read.tx.transaction_body.outputs[taken.bond_output]
        assert datum_as(inline_datum(going_on), Script.BOND) == bonds.bond_datum(deployment, bond)
        assert read.slashed() == {escrow.input} and read.settled == {}
