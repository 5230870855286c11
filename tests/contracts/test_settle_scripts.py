"""The two settle scripts agree: the hand-written one (deployed) and its OpShin reference accept
and refuse the same batches, failing with the same trace. Each vector is a script context made
by hand and evaluated directly (no devnet, no ledger checks around it), so shapes a builder
would never make are covered too: an honest batch of three providers, two consumers and a
key input, signed by claims and receipts mixed, and each way of breaking it
(tests/protocol/test_settle_attacks.py submits the attacks a ledger lets through to the
devnet). An index out of range (signer, payee, first_refund, a missing item or receipt) fails
in a builtin, untraced in at least one of the two: those are only required refused by both."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pycardano import (
    PaymentSigningKey,
    ScriptHash,
    TransactionId,
    TransactionInput,
    plutus_script_hash,
)

from contracts.artifacts import settle_script
from devnet.params import ProtocolParameters
from devnet.phase2 import ScriptJob, ScriptOutcome, run_job
from devnet.script_context import FALSE, NOTHING, Constr, Data, DataMap, encode_data
from offchain.protocol.ledger.payloads import CLAIM_DOMAIN, claim_payload, sign
from offchain.protocol.tx.tx_reader import ledger_order

NETWORK = 0
PRICE, MAX_UNITS, ALLOWANCE, EXTRA = 2_000, 3_600, 2_000_000, 3_000_000
LOCKED = PRICE * MAX_UNITS + ALLOWANCE + EXTRA
CLOSE = 1_700_000_000_000  # every escrow's deadline + settle window (POSIX ms)
NO_DATUM = Constr(0)
SETTLE = Constr(0)  # the escrows' spend redeemer


def key(name: str) -> PaymentSigningKey:
    return PaymentSigningKey(hashlib.sha256(name.encode()).digest())


def vkey(name: str) -> bytes:
    return key(name).to_verification_key().payload


def address(name: str) -> Constr:
    """A key's full address (payment and stake credential)."""
    payment = key(name).to_verification_key().hash().payload
    stake = hashlib.blake2b(name.encode(), digest_size=28).digest()
    return Constr(0, (Constr(0, (payment,)), Constr(0, (Constr(0, (Constr(0, (stake,)),)),))))


def credential(script_hash: bytes) -> Constr:
    return Constr(1, (script_hash,))


ESCROW_SCRIPT = hashlib.blake2b(b"escrow", digest_size=28).digest()
OTHER_SCRIPT = hashlib.blake2b(b"always succeeds", digest_size=28).digest()


@dataclasses.dataclass
class Escrow:
    """An escrow input: its terms, the units claimed on it, who signed them (a claim's index,
    or -1: its own receipt) and which provider output pays it (-1: none)."""

    consumer: str
    provider: str
    units: int
    signer: int
    payee: int
    ref: tuple[bytes, int]
    lovelace: int = LOCKED
    price: int = PRICE
    max_units: int = MAX_UNITS
    payment: Constr = dataclasses.field(default_factory=lambda: credential(ESCROW_SCRIPT))
    datum: Data | None = None  # the OutputDatum, when not the inline escrow datum

    @property
    def due(self) -> int:
        return self.price * self.units

    @property
    def owed(self) -> int:
        return max(0, self.lovelace - self.due - ALLOWANCE)

    @property
    def input(self) -> TransactionInput:
        return TransactionInput(TransactionId(self.ref[0]), self.ref[1])

    def info(self) -> Constr:
        terms = Constr(
            0,
            (
                address(self.consumer), address(self.provider), vkey(self.provider), self.price,
                self.max_units, CLOSE - 60_000, 60_000, b"j" * 32, ALLOWANCE,
            ),
        )  # fmt: skip
        datum = Constr(2, (terms,)) if self.datum is None else self.datum
        value = DataMap(((b"", DataMap(((b"", self.lovelace),))),))
        out = Constr(0, (Constr(0, (self.payment, NOTHING)), value, datum, NOTHING))
        return Constr(0, (Constr(0, self.ref), out))


def out(to: Data, lovelace: int, datum: Data = NO_DATUM) -> Constr:
    return Constr(0, (to, DataMap(((b"", DataMap(((b"", lovelace),))),)), datum, NOTHING))


RECEIPT_NOTE = hashlib.sha256(b"result" + b"evidence").digest()


@dataclasses.dataclass
class Batch:
    """One settle transaction as its settle run sees it; `sign` signs each claim, `sign_receipt`
    each receipt (in ledger order of the escrows with signer -1)."""

    settle_hash: bytes
    escrows: list[Escrow]
    claims: list[dict]  # SettleClaim fields by name, with "signer" (the key's name)
    receipts: list[dict]  # SettleReceipt fields by name, with "signer"
    outputs: list[Constr]
    first_refund: Data
    items: list[Data] | None = None  # default: each escrow's units, signer and payee
    withdrawals: list[Constr] = dataclasses.field(default_factory=list)  # beside its own
    upper: Constr = dataclasses.field(default_factory=lambda: Constr(1, (CLOSE,)))
    other_redeemers: list[tuple[Data, Data]] = dataclasses.field(default_factory=list)
    purpose: Constr | None = None

    def ledger(self) -> list[Escrow]:
        return sorted(self.escrows, key=lambda e: e.ref)

    def claim(self, c: int) -> list[tuple[TransactionInput, int]]:
        return [(e.input, e.units) for e in self.escrows if e.signer == c]

    def payload(self, signer: str, **signed) -> bytes:
        fields = dict(
            network_id=NETWORK, settle_hash=ScriptHash(self.settle_hash)
        )  # fmt: skip
        return sign(key(signer), claim_payload(**{**fields, **signed}))

    def sign(self, c: int, **signed) -> bytes:
        spec = self.claims[c]
        return self.payload(
            spec["signer"], **{"note": spec["note"], "claims": self.claim(c), **signed}
        )

    def sign_receipt(self, r: int, **signed) -> bytes:
        spec = self.receipts[r]
        alone = [e for e in self.ledger() if e.signer == -1][r]
        claims = [(alone.input, alone.units)]
        return self.payload(spec["signer"], **{"note": spec["note"], "claims": claims, **signed})

    def context(self) -> bytes:
        own = credential(self.settle_hash)
        escrows = self.ledger()
        fee = Constr(0, (Constr(0, FEE_REF), out(address("submitter"), 50_000_000)))
        inputs = [e.info() for e in escrows]
        inputs.insert(sum(e.ref < FEE_REF for e in escrows), fee)
        items = self.items
        if items is None:
            items = [n for e in escrows for n in (e.units, e.signer, e.payee)]
        claims = [Constr(0, (c["note"], c.get("signature", b""), c["vkey"])) for c in self.claims]
        receipts = [Constr(0, (r["note"], r.get("signature", b""))) for r in self.receipts]
        redeemer = Constr(0, (items, claims, receipts, self.first_refund))
        spends = [(Constr(1, (Constr(0, e.ref),)), SETTLE) for e in escrows]
        withdraw = Constr(2, (own,))
        redeemers = DataMap((*spends, *self.other_redeemers, (withdraw, redeemer)))
        always = Constr(0, (Constr(0, (Constr(0), Constr(1))), Constr(0, (self.upper, FALSE))))
        info = Constr(
            0,
            (
                inputs, [], self.outputs, 200_000, DataMap(()), [],
                DataMap(((own, 0), *((w, 0) for w in self.withdrawals))),
                always, [], redeemers, DataMap(()), b"\x00" * 32, DataMap(()), [],
                NOTHING, NOTHING,
            ),
        )  # fmt: skip
        return encode_data([Constr(0, (info, redeemer, self.purpose or withdraw))])


def ref(n: int) -> tuple[bytes, int]:
    """The n-th escrow's out-ref: refs sort as numbered, the fee input's between 1 and 2."""
    return (bytes([0x10 + n]) * 32, 0)


FEE_REF = (bytes([0x11]) * 32, 1)


def honest(settle_hash: bytes) -> Batch:
    """Five escrows in ledger order: two of alice's with p1 (one refund), the first claimed,
    the second its own receipt (one payout for both); bob's with p2, claimed; alice's with p2
    by its receipt (a refund of its own: not adjacent to her first run; p2's one payout for
    both); bob's with p3, claiming nothing (paid in no output); the fee input sits among
    them."""
    escrows = [
        Escrow("alice", "p1", 100, 0, 0, ref(0)),
        Escrow("alice", "p1", 200, -1, 0, ref(1)),
        Escrow("bob", "p2", 50, 1, 1, ref(2)),
        Escrow("alice", "p2", 10, -1, 1, ref(3)),
        Escrow("bob", "p3", 0, 2, -1, ref(4)),
    ]
    claims = [
        dict(note=b"n1", vkey=vkey("p1"), signer="p1"),
        dict(note=b"n2", vkey=vkey("p2"), signer="p2"),
        dict(note=b"", vkey=vkey("p3"), signer="p3"),
    ]
    receipts = [
        dict(note=RECEIPT_NOTE, signer="p1"),
        dict(note=RECEIPT_NOTE, signer="p2"),
    ]
    batch = Batch(settle_hash, escrows, claims, receipts, [], 2)
    payouts = [
        out(address(p), sum(e.due for e in escrows if e.provider == p)) for p in ("p1", "p2")
    ]
    runs: list[tuple[str, int]] = []
    for e in escrows:
        if runs and runs[-1][0] == e.consumer:
            runs[-1] = (e.consumer, runs[-1][1] + e.owed)
        else:
            runs.append((e.consumer, e.owed))
    refunds = [out(address(c), owed) for c, owed in runs if owed > 0]
    batch.outputs = [*payouts, *refunds, out(address("submitter"), 9_000_000)]
    for c, spec in enumerate(claims):
        spec["signature"] = batch.sign(c)
    for r, spec in enumerate(receipts):
        spec["signature"] = batch.sign_receipt(r)
    return batch


def run(reference: bool, attack: Callable[[Batch], object] | None) -> ScriptOutcome:
    """One settle script's run on the honest batch, broken by `attack` first."""
    script = settle_script(NETWORK, reference)
    batch = honest(plutus_script_hash(script).payload)
    if attack is not None:
        attack(batch)
    params = ProtocolParameters()
    job = ScriptJob(
        "withdraw", 0, 3, bytes(script), batch.context(), params.max_tx_memory,
        params.max_tx_steps,
    )  # fmt: skip
    return run_job(job, params.cost_models)


def field(c: int, name: str, value: Data) -> Callable[[Batch], None]:
    return lambda batch: batch.claims[c].update({name: value})


def receipt_field(r: int, name: str, value: Data) -> Callable[[Batch], None]:
    return lambda batch: batch.receipts[r].update({name: value})


def resign(c: int, **signed) -> Callable[[Batch], None]:
    """Claim c signed again over something else (claim_payload's arguments)."""
    return lambda batch: batch.claims[c].update(signature=batch.sign(c, **signed))


def resign_receipt(r: int, **signed) -> Callable[[Batch], None]:
    """Receipt r signed again over something else (claim_payload's arguments)."""
    return lambda batch: batch.receipts[r].update(signature=batch.sign_receipt(r, **signed))


def escrow(n: int, **changes) -> Callable[[Batch], None]:
    return lambda batch: [setattr(batch.escrows[n], k, v) for k, v in changes.items()]


def outputs(change: Callable[[list[Constr]], object]) -> Callable[[Batch], None]:
    return lambda batch: change(batch.outputs)


def lovelace_less(index: int) -> Callable[[list[Constr]], None]:
    def less(made: list[Constr]) -> None:
        to, value, datum, _ = made[index].fields
        made[index] = out(to, value.pairs[0][1].pairs[0][1] - 1, datum)

    return less


def with_datum(index: int) -> Callable[[list[Constr]], None]:
    def tag(made: list[Constr]) -> None:
        to, value, _, script = made[index].fields
        made[index] = Constr(0, (to, value, Constr(2, (b"tag",)), script))

    return tag


def to(index: int, name: str) -> Callable[[list[Constr]], None]:
    def move(made: list[Constr]) -> None:
        _, value, datum, script = made[index].fields
        made[index] = Constr(0, (address(name), value, datum, script))

    return move


def swap(a: int, b: int) -> Callable[[list], None]:
    def swapped(made: list) -> None:
        made[a], made[b] = made[b], made[a]

    return swapped


def both(*attacks: Callable[[Batch], object]) -> Callable[[Batch], None]:
    return lambda batch: [attack(batch) for attack in attacks]


def items(change: Callable[[list[Data]], list[Data]]) -> Callable[[Batch], None]:
    def changed(batch: Batch) -> None:
        made = [n for e in batch.ledger() for n in (e.units, e.signer, e.payee)]
        batch.items = change(made)

    return changed


def foreign_input(first: bool) -> Callable[[Batch], None]:
    """Another script's input (an always-succeeds script, holding an escrow's datum)."""

    def add(batch: Batch) -> None:
        made = Escrow("alice", "p1", 0, 0, -1, (b"\x00" * 32 if first else b"\xee" * 32, 0))
        made.payment = credential(OTHER_SCRIPT)
        batch.escrows.append(made)

    return add


def empty_claim(batch: Batch) -> None:
    batch.claims.append(dict(note=b"", vkey=vkey("p3"), signer="p3"))
    batch.claims[-1]["signature"] = batch.sign(len(batch.claims) - 1)


def unused_receipt(batch: Batch) -> None:
    batch.receipts.append(dict(batch.receipts[0]))


def int_note(batch: Batch) -> None:
    """A note that is not bytes, signed as such: both scripts sign it as it comes."""
    batch.claims[0]["note"] = 7
    claimed = sorted(batch.claim(0), key=lambda claim: ledger_order(claim[0]), reverse=True)
    flat = [
        n for r, units in claimed for n in (Constr(0, (r.transaction_id.payload, r.index)), units)
    ]
    claim = Constr(0, (CLAIM_DOMAIN, NETWORK, batch.settle_hash, 7, flat))
    batch.claims[0]["signature"] = sign(key("p1"), encode_data(claim))


def also_withdraw(batch: Batch) -> None:
    batch.withdrawals.append(Constr(0, (b"k" * 28,)))


def other_redeemer(batch: Batch) -> None:
    batch.other_redeemers.append((Constr(0, (OTHER_SCRIPT,)), Constr(0)))


ITEMS = "one item per escrow input, one receipt per escrow signed alone, and no script but"
TRACED = {  # an honest batch broken one way, and the check that refuses it
    "a spending purpose": (
        lambda b: setattr(b, "purpose", Constr(1, (Constr(0, ref(0)), NOTHING))),
        "purpose",
    ),
    "a second withdrawal": (also_withdraw, "one withdrawal, and an upper bound"),
    "no upper bound": (lambda b: setattr(b, "upper", Constr(2)), "one withdrawal"),
    "an upper bound past a close": (
        lambda b: setattr(b, "upper", Constr(1, (CLOSE + 1,))),
        "units or time",
    ),
    "no items": (items(lambda made: []), "empty batch"),
    "an extra item": (items(lambda made: [*made, 0, 0, -1]), ITEMS),
    "an extra redeemer (a mint)": (other_redeemer, ITEMS),
    "an unused receipt": (unused_receipt, ITEMS),
    "negative units": (escrow(1, units=-1), "units or time"),
    "units above max_units": (escrow(1, units=MAX_UNITS + 1), "units or time"),
    "a negative price": (escrow(1, price=-PRICE), "units or time"),
    "another script's input first": (foreign_input(True), "one escrow script"),
    "another script's input last": (foreign_input(False), "one escrow script"),
    "a claim naming another provider's key": (field(0, "vkey", vkey("p2")), "one key per claim"),
    "an escrow in another provider's claim": (escrow(4, signer=1), "one key per claim"),
    "a payout to another address": (outputs(to(0, "mallory")), "one provider per payout"),
    "providers' outputs swapped": (outputs(swap(0, 1)), "one provider per payout"),
    "an escrow paid at another provider's output": (
        escrow(4, payee=0),
        "one provider per payout",
    ),
    "a receipt's escrow paid at another provider's output": (
        escrow(1, payee=1),
        "one provider per payout",
    ),
    "an escrow earning with no payee": (escrow(4, units=1), "provider payout"),
    "two escrows of a provider paid a lovelace short": (
        outputs(lovelace_less(0)),
        "provider payout",
    ),
    "a provider payout with a datum": (outputs(with_datum(1)), "provider payout"),
    "a merged refund a lovelace short": (outputs(lovelace_less(2)), "consumer refund"),
    "the last refund a lovelace short": (outputs(lovelace_less(5)), "consumer refund"),
    "a refund with a datum": (outputs(with_datum(3)), "consumer refund"),
    "a refund to another address": (outputs(to(4, "mallory")), "consumer refund"),
    "refunds swapped": (outputs(swap(2, 3)), "consumer refund"),
    "a claim omitting an escrow": (resign(0, claims=[]), "claim signature"),
    "a claim adding an escrow": (
        resign(1, claims=[(TransactionInput(TransactionId(ref(n)[0]), 0), 50) for n in (2, 4)]),
        "claim signature",
    ),
    "a claim signed for another network": (resign(1, network_id=1), "claim signature"),
    "a claim for another settle script": (
        resign(0, settle_hash=ScriptHash(bytes(28))),
        "claim signature",
    ),
    "a claim with another note": (resign(0, note=b"other"), "claim signature"),
    "a claim by another key": (both(field(0, "signer", "mallory"), resign(0)), "claim signature"),
    "a claim covering no escrow": (empty_claim, "claim signature"),
    "a receipt by another key": (
        both(receipt_field(0, "signer", "mallory"), resign_receipt(0)),
        "receipt signature",
    ),
    "a receipt for other units": (
        resign_receipt(1, claims=[(TransactionInput(TransactionId(ref(3)[0]), 0), 11)]),
        "receipt signature",
    ),
    "a receipt for another network": (resign_receipt(0, network_id=1), "receipt signature"),
    "a receipt for another settle script": (
        resign_receipt(1, settle_hash=ScriptHash(bytes(28))),
        "receipt signature",
    ),
    "a receipt with another note": (receipt_field(0, "note", b"other"), "receipt signature"),
    "receipts swapped": (lambda b: swap(0, 1)(b.receipts), "receipt signature"),
    "a claimed escrow taking a receipt's place": (escrow(1, signer=0), "receipt signature"),
}


def no_escrow_input(batch: Batch) -> None:
    """The honest items, but no escrow spent: a batch that would only withdraw."""
    items(lambda made: made)(batch)
    batch.escrows = []


TRACED["items but no escrow input"] = (no_escrow_input, "no script input")

UNTRACED = {  # shapes a builder never makes: refused by both (a builtin failing in one at least)
    "no claims": lambda b: b.claims.clear(),
    "no receipts": lambda b: b.receipts.clear(),
    "a missing item triple": items(lambda made: made[:-3]),
    "a missing payee": items(lambda made: made[:-1]),
    "a signer index past the claims": escrow(2, signer=3),
    "a signer below -1": escrow(2, signer=-2),
    "a payee index among the refunds": escrow(2, payee=2),
    "a payee index past the outputs": escrow(2, payee=99),
    "a payee below -1": escrow(2, payee=-2),
    "refunds start at a provider output": lambda b: setattr(b, "first_refund", 1),
    "a negative first_refund": lambda b: setattr(b, "first_refund", -1),
    "first_refund past the outputs": lambda b: setattr(b, "first_refund", 99),
    "an escrow under a datum hash": escrow(0, datum=Constr(1, (b"h" * 32,))),
    "an escrow without a datum": escrow(0, datum=NO_DATUM),
}


@pytest.fixture(scope="module", params=[False, True], ids=["deployed", "reference"])
def reference(request: pytest.FixtureRequest) -> bool:
    return request.param


def test_both_accept_the_honest_batch_to_the_lovelace():
    for reference in (False, True):
        outcome = run(reference, None)
        assert outcome.error is None, (reference, outcome.error, outcome.traces)


def test_both_accept_a_note_that_is_not_bytes_when_signed_as_such():
    for reference in (False, True):
        assert run(reference, int_note).error is None


@pytest.mark.parametrize("name", TRACED)
def test_both_refuse_with_the_same_trace(name):
    attack, trace = TRACED[name]
    deployed, readable = run(False, attack), run(True, attack)
    assert deployed.error is not None and trace in " ".join(deployed.traces), deployed
    assert readable.error is not None and readable.traces == deployed.traces, readable


@pytest.mark.parametrize("name", UNTRACED)
def test_both_refuse_an_index_out_of_range(name):
    deployed, readable = run(False, UNTRACED[name]), run(True, UNTRACED[name])
    assert deployed.error is not None, deployed
    assert readable.error is not None, readable
    # traced in one, then the same trace in the other, if any
    assert not (deployed.traces and readable.traces) or deployed.traces == readable.traces


def nudged(changes: list[tuple[str, int, int]]) -> Callable[[Batch], None]:
    """The honest batch with numbers moved: (what, which, by) of an item, first_refund, an
    output's lovelace, or a swap of two outputs or of two receipts."""

    def nudge(batch: Batch) -> None:
        made = [n for e in batch.ledger() for n in (e.units, e.signer, e.payee)]
        batch.items = batch.items or made
        for what, which, by in changes:
            if what == "item":
                batch.items[which % len(batch.items)] += by
            elif what == "receipts":
                swap(which % 2, by % 2)(batch.receipts)
            elif what == "first_refund":
                batch.first_refund = int(batch.first_refund) + by
            elif what == "lovelace":
                index = which % len(batch.outputs)
                to, value, datum, _ = batch.outputs[index].fields
                batch.outputs[index] = out(to, value.pairs[0][1].pairs[0][1] + by, datum)
            else:
                swap(which % len(batch.outputs), by % len(batch.outputs))(batch.outputs)

    return nudge


@pytest.mark.slow  # 40 batches through both scripts: seconds
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["item", "receipts", "first_refund", "lovelace", "swap"]),
            st.integers(0, 9),
            st.integers(-2, 2),
        ),
        min_size=1,
        max_size=3,
    )
)
def test_both_agree_on_any_nudge_of_the_honest_batch(changes):
    """Same outcome; the same trace where both trace (an index nudged out of range may fail
    in a builtin in one of them, untraced)."""
    deployed, readable = run(False, nudged(changes)), run(True, nudged(changes))
    assert (deployed.error is None) == (readable.error is None), (deployed, readable)
    if deployed.traces and readable.traces:
        assert deployed.traces == readable.traces
