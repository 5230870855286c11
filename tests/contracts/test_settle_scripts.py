"""The two settle scripts agree: the hand-written one (deployed) and its OpShin reference accept
and refuse the same batches, failing with the same trace. Each vector is a script context made
by hand and evaluated directly (no devnet, no ledger checks around it), so shapes a builder
would never make are covered too: an honest batch of three providers, two consumers and a
key input, and each way of breaking it (tests/protocol/test_settle_attacks.py submits the
attacks a ledger lets through to the devnet)."""

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
from offchain.devnet.params import ProtocolParameters
from offchain.devnet.phase2 import ScriptJob, ScriptOutcome, run_job
from offchain.devnet.script_context import FALSE, NOTHING, Constr, Data, DataMap, encode_data
from offchain.protocol.payloads import CLAIM_DOMAIN, claim_payload, sign
from offchain.protocol.tx_reader import ledger_order

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
    """An escrow input: its terms, the units claimed on it and its group."""

    consumer: str
    provider: str
    units: int
    group: int
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


@dataclasses.dataclass
class Batch:
    """One settle transaction as its settle run sees it; `sign` signs each group's claim."""

    settle_hash: bytes
    escrows: list[Escrow]
    groups: list[dict]  # SettleGroup fields by name, with "signer" (the key's name)
    outputs: list[Constr]
    first_refund: Data
    items: list[Data] | None = None  # default: each escrow's units and group
    withdrawals: list[Constr] = dataclasses.field(default_factory=list)  # beside its own
    upper: Constr = dataclasses.field(default_factory=lambda: Constr(1, (CLOSE,)))
    other_redeemers: list[tuple[Data, Data]] = dataclasses.field(default_factory=list)
    purpose: Constr | None = None

    def claim(self, g: int) -> list[tuple[TransactionInput, int]]:
        return [
            (TransactionInput(TransactionId(e.ref[0]), e.ref[1]), e.units)
            for e in self.escrows
            if e.group == g
        ]

    def sign(self, g: int, **signed) -> bytes:
        spec = self.groups[g]
        fields = dict(
            network_id=NETWORK, settle_hash=ScriptHash(self.settle_hash), note=spec["note"],
            claims=self.claim(g),
        )  # fmt: skip
        return sign(key(spec["signer"]), claim_payload(**{**fields, **signed}))

    def context(self) -> bytes:
        own = credential(self.settle_hash)
        escrows = sorted(self.escrows, key=lambda e: e.ref)
        fee = Constr(0, (Constr(0, FEE_REF), out(address("submitter"), 50_000_000)))
        inputs = [e.info() for e in escrows]
        inputs.insert(sum(e.ref < FEE_REF for e in escrows), fee)
        items = self.items
        if items is None:
            items = [n for e in escrows for n in (e.units, e.group)]
        groups = [
            Constr(0, (g["note"], g.get("signature", b""), g["output"], g["vkey"]))
            for g in self.groups
        ]
        redeemer = Constr(0, (items, groups, self.first_refund))
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
    """Five escrows in ledger order: two of alice's with p1 (one refund), bob's with p2,
    alice's with p2 (a refund of its own: not adjacent to her first run), bob's with p3 that
    claims nothing (a group paid in no output); the fee input sits among them."""
    escrows = [
        Escrow("alice", "p1", 100, 0, ref(0)),
        Escrow("alice", "p1", 200, 0, ref(1)),
        Escrow("bob", "p2", 50, 1, ref(2)),
        Escrow("alice", "p2", 10, 1, ref(3)),
        Escrow("bob", "p3", 0, 2, ref(4)),
    ]
    groups = [
        dict(note=b"n1", output=0, vkey=vkey("p1"), signer="p1"),
        dict(note=b"n2", output=1, vkey=vkey("p2"), signer="p2"),
        dict(note=b"", output=-1, vkey=vkey("p3"), signer="p3"),
    ]
    batch = Batch(settle_hash, escrows, groups, [], 2)
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
    for g, spec in enumerate(groups):
        spec["signature"] = batch.sign(g)
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


def field(g: int, name: str, value: Data) -> Callable[[Batch], None]:
    return lambda batch: batch.groups[g].update({name: value})


def resign(g: int, **signed) -> Callable[[Batch], None]:
    """Group g's claim signed again over something else (claim_payload's arguments)."""
    return lambda batch: batch.groups[g].update(signature=batch.sign(g, **signed))


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


def p2_paid_last(batch: Batch) -> None:
    """p2's payout moved after the refunds, which now start at output 1."""
    batch.outputs.append(batch.outputs.pop(1))
    batch.first_refund = 1
    batch.groups[1]["output"] = len(batch.outputs) - 1


def items(change: Callable[[list[Data]], list[Data]]) -> Callable[[Batch], None]:
    def changed(batch: Batch) -> None:
        batch.items = change([n for e in batch.escrows for n in (e.units, e.group)])

    return changed


def foreign_input(first: bool) -> Callable[[Batch], None]:
    """Another script's input (an always-succeeds script, holding an escrow's datum)."""

    def add(batch: Batch) -> None:
        made = Escrow("alice", "p1", 0, 0, (b"\x00" * 32 if first else b"\xee" * 32, 0))
        made.payment = credential(OTHER_SCRIPT)
        batch.escrows.append(made)

    return add


def empty_group(batch: Batch) -> None:
    batch.groups.append(dict(note=b"", output=-1, vkey=vkey("p3"), signer="p3"))
    batch.groups[-1]["signature"] = batch.sign(len(batch.groups) - 1)


def int_note(batch: Batch) -> None:
    """A note that is not bytes, signed as such: both scripts sign it as it comes."""
    batch.groups[0]["note"] = 7
    claimed = sorted(batch.claim(0), key=lambda claim: ledger_order(claim[0]), reverse=True)
    flat = [
        n for r, units in claimed for n in (Constr(0, (r.transaction_id.payload, r.index)), units)
    ]
    claim = Constr(0, (CLAIM_DOMAIN, NETWORK, batch.settle_hash, 7, flat))
    batch.groups[0]["signature"] = sign(key("p1"), encode_data(claim))


def no_groups(batch: Batch) -> None:
    batch.groups.clear()


def also_withdraw(batch: Batch) -> None:
    batch.withdrawals.append(Constr(0, (b"k" * 28,)))


def other_redeemer(batch: Batch) -> None:
    batch.other_redeemers.append((Constr(0, (OTHER_SCRIPT,)), Constr(0)))


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
    "an extra item": (items(lambda made: [*made, 0, 0]), "one item per escrow input"),
    "an extra redeemer (a mint)": (other_redeemer, "no script but escrows"),
    "negative units": (escrow(1, units=-1), "units or time"),
    "units above max_units": (escrow(1, units=MAX_UNITS + 1), "units or time"),
    "a negative price": (escrow(1, price=-PRICE), "units or time"),
    "another script's input first": (foreign_input(True), "one escrow script"),
    "another script's input last": (foreign_input(False), "one escrow script"),
    "a group naming another provider's key": (field(0, "vkey", vkey("p2")), "one provider"),
    "a group paid to another address": (outputs(to(0, "mallory")), "one provider per group"),
    "providers' outputs swapped": (outputs(swap(0, 1)), "one provider per group"),
    "an escrow earning in a group paid nothing": (escrow(4, units=1), "one provider per group"),
    "an escrow in another provider's group": (escrow(4, group=0), "one provider per group"),
    "providers' outputs out of order": (
        both(outputs(swap(0, 1)), field(0, "output", 1), field(1, "output", 0)),
        "provider output order",
    ),
    "a provider output among the refunds": (p2_paid_last, "provider output order"),
    "a provider paid a lovelace short": (outputs(lovelace_less(0)), "provider payout"),
    "a provider payout with a datum": (outputs(with_datum(1)), "provider payout"),
    "a merged refund a lovelace short": (outputs(lovelace_less(2)), "consumer refund"),
    "the last refund a lovelace short": (outputs(lovelace_less(5)), "consumer refund"),
    "a refund with a datum": (outputs(with_datum(3)), "consumer refund"),
    "a refund to another address": (outputs(to(4, "mallory")), "consumer refund"),
    "refunds swapped": (outputs(swap(2, 3)), "consumer refund"),
    "refunds start at a provider output": (lambda b: setattr(b, "first_refund", 1), "refund"),
    "a claim omitting an escrow": (resign(0, claims=[]), "claim signature"),
    "a claim signed for another network": (resign(1, network_id=1), "claim signature"),
    "a claim for another settle script": (
        resign(0, settle_hash=ScriptHash(bytes(28))),
        "claim signature",
    ),
    "a claim with another note": (resign(0, note=b"other"), "claim signature"),
    "a claim by another key": (both(field(0, "signer", "mallory"), resign(0)), "claim signature"),
    "a group claiming no escrow": (empty_group, "claim signature"),
}

UNTRACED = {  # shapes a builder never makes: refused by a builtin failing, in both
    "no groups": no_groups,
    "a missing item pair": items(lambda made: made[:-2]),
    "an odd item": items(lambda made: made[:-1]),
    "a group index past the groups": escrow(1, group=3),
    "a negative group index": escrow(1, group=-1),
    "a negative first_refund": lambda b: setattr(b, "first_refund", -1),
    "first_refund past the outputs": lambda b: setattr(b, "first_refund", 99),
    "a group output past the outputs": field(0, "output", 99),
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
def test_both_refuse_without_a_trace(name):
    deployed, readable = run(False, UNTRACED[name]), run(True, UNTRACED[name])
    assert deployed.error is not None and deployed.traces == (), deployed
    assert readable.error is not None and readable.traces == (), readable


def nudged(changes: list[tuple[str, int, int]]) -> Callable[[Batch], None]:
    """The honest batch with numbers moved: (what, which, by) of an item, a group's output,
    first_refund, an output's lovelace, or a swap of two outputs."""

    def nudge(batch: Batch) -> None:
        made = [n for e in sorted(batch.escrows, key=lambda e: e.ref) for n in (e.units, e.group)]
        batch.items = batch.items or made
        for what, which, by in changes:
            if what == "item":
                batch.items[which % len(batch.items)] += by
            elif what == "output":
                batch.groups[which % len(batch.groups)]["output"] += by
            elif what == "first_refund":
                batch.first_refund = int(batch.first_refund) + by
            elif what == "lovelace":
                index = which % len(batch.outputs)
                to, value, datum, _ = batch.outputs[index].fields
                batch.outputs[index] = out(to, value.pairs[0][1].pairs[0][1] + by, datum)
            else:
                swap(which % len(batch.outputs), by % len(batch.outputs))(batch.outputs)

    return nudge


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["item", "output", "first_refund", "lovelace", "swap"]),
            st.integers(0, 9),
            st.integers(-2, 2),
        ),
        min_size=1,
        max_size=3,
    )
)
def test_both_agree_on_any_nudge_of_the_honest_batch(changes):
    deployed, readable = run(False, nudged(changes)), run(True, nudged(changes))
    assert (deployed.error is None, deployed.traces) == (readable.error is None, readable.traces)
