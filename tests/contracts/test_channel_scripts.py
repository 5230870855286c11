"""The channel script and the batch claim script, evaluated on script contexts made by hand (as
tests/contracts/test_settle_scripts.py does: no devnet, no ledger checks around them), so
shapes a builder would never make are covered too. Every redeemer's honest transaction passes,
and each attack beside it is refused by its trace (PROTOCOL.md lists them)."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pycardano import ScriptHash, plutus_script_hash

from contracts.artifacts import channel_script, claim_script
from devnet.params import ProtocolParameters
from devnet.phase2 import ScriptJob, ScriptOutcome, run_job
from devnet.script_context import FALSE, NOTHING, TRUE, Constr, Data, DataMap, encode_data
from offchain.protocol.ledger.payloads import iou_payload, sign
from tests.contracts.test_settle_scripts import NO_DATUM, address, both, key, out, vkey

NETWORK = 0
DEPOSIT = 20_000_000
PERIOD = 3_600_000  # close_period_ms
NOW = 1_700_000_000_000  # the honest transactions' validity upper bound (POSIX ms)
CLAIM_HASH = plutus_script_hash(claim_script(NETWORK)).payload
CHANNEL = channel_script(CLAIM_HASH)
CHANNEL_HASH = plutus_script_hash(CHANNEL).payload
OTHER_SCRIPT = hashlib.blake2b(b"always succeeds", digest_size=28).digest()
CLAIM = Constr(0)  # the channels' spend redeemer in a batch claim
POLICY = b"\x0a" * 28
ELSEWHERE = Constr(0, (Constr(1, (CHANNEL_HASH,)), NOTHING))  # the channel script, unstaked


def blake2b_224(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=28).digest()


def ref(n: int) -> tuple[bytes, int]:
    """The n-th channel's out-ref: refs sort as numbered, the fee input's between 1 and 2."""
    return (bytes([0x10 + n]) * 32, 0)


FEE_REF = (bytes([0x11]) * 32, 1)


def value(lovelace: int, tokens: int = 0) -> DataMap:
    ada = (b"", DataMap(((b"", lovelace),)))
    if not tokens:
        return DataMap((ada,))
    return DataMap((ada, (POLICY, DataMap(((b"t", tokens),)))))


def interval(lower: int | None, upper: int | None) -> Constr:
    """A validity range; None: unbounded on that side."""
    low = Constr(0) if lower is None else Constr(1, (lower,))
    high = Constr(2) if upper is None else Constr(1, (upper,))
    return Constr(0, (Constr(0, (low, TRUE)), Constr(0, (high, FALSE))))


@dataclasses.dataclass
class Channel:
    """A channel input: its terms, datum and value, and (in a claim) the IOU it is claimed by
    and the provider output that pays it."""

    renter: str
    provider: str
    ref: tuple[bytes, int]
    claimed: int = 0
    closing_at: int = -1
    lovelace: int = DEPOSIT
    tokens: int = 0
    amount: int = 5_000_000  # the IOU claimed
    payee: int = 0
    script: bytes = CHANNEL_HASH

    def terms(self, **changes: Data) -> Constr:
        fields: dict[str, Data] = dict(
            renter=address(self.renter), provider=address(self.provider),
            provider_vkey=vkey(self.provider), close_period_ms=PERIOD,
            nonce=Constr(0, (b"\x99" * 32, self.ref[1])),
        )  # fmt: skip
        return Constr(0, tuple({**fields, **changes}.values()))

    @property
    def id(self) -> bytes:
        return blake2b_224(encode_data(self.terms()))

    def datum(self, **changes: Data) -> Constr:
        fields: dict[str, Data] = dict(
            renter_vkey=vkey(self.renter), payee=blake2b_224(encode_data(address(self.provider))),
            terms=self.id, claimed=self.claimed, closing_at=self.closing_at,
        )  # fmt: skip
        return Constr(0, tuple({**fields, **changes}.values()))

    @property
    def address(self) -> Constr:
        """The channel script's address, staked like the renter."""
        return Constr(0, (Constr(1, (self.script,)), address(self.renter).fields[1]))

    def output(self) -> Constr:
        held = value(self.lovelace, self.tokens)
        return Constr(0, (self.address, held, Constr(2, (self.datum(),)), NOTHING))

    def input(self) -> Constr:
        return Constr(0, (Constr(0, self.ref), self.output()))

    def continuing(self, **changes: Data) -> Constr:
        """Its continuing output in an honest claim of `amount`."""
        datum = self.datum(**{"claimed": self.amount, **changes})
        held = value(self.lovelace - (self.amount - self.claimed), self.tokens)
        return Constr(0, (self.address, held, Constr(2, (datum,)), NOTHING))

    def signature(self, **signed: object) -> bytes:
        fields = dict(
            network_id=NETWORK, channel_hash=ScriptHash(CHANNEL_HASH), channel=self.id,
            amount=self.amount,
        )  # fmt: skip
        return sign(key(self.renter), iou_payload(**{**fields, **signed}))  # type: ignore[arg-type]


def fee_input() -> Constr:
    return Constr(0, (Constr(0, FEE_REF), out(address("submitter"), 50_000_000)))


def tx_info(
    inputs: list[Constr],
    outputs: list[Constr],
    redeemers: list[tuple[Data, Data]],
    withdrawals: list[Constr],
    validity: Constr,
    signatories: list[bytes],
) -> Constr:
    return Constr(
        0,
        (
            inputs, [], outputs, 200_000, DataMap(()), [],
            DataMap(tuple((w, 0) for w in withdrawals)), validity, signatories,
            DataMap(tuple(redeemers)), DataMap(()), b"\x00" * 32, DataMap(()), [], NOTHING,
            NOTHING,
        ),
    )  # fmt: skip


def evaluate(script: bytes, purpose: str, context: Constr) -> ScriptOutcome:
    params = ProtocolParameters()
    job = ScriptJob(
        purpose, 0, 3, script, encode_data([context]), params.max_tx_memory, params.max_tx_steps
    )
    return run_job(job, params.cost_models)


# ---------------------------------------------------------------------------- batch claim


@dataclasses.dataclass
class Batch:
    """One claim transaction as the claim script sees it: its channels, the provider outputs
    (first_continuing of them) and each channel's continuing output, in ledger order."""

    channels: list[Channel]
    payouts: list[Constr]
    signatures: list[Data] = dataclasses.field(default_factory=list)
    continuing: list[Constr] = dataclasses.field(default_factory=list)
    payees: list[Data] | None = None  # default: each channel's payee
    first_continuing: int | None = None  # default: len(payouts)
    withdrawals: list[Constr] = dataclasses.field(default_factory=list)  # beside its own
    upper: int | None = NOW
    other_redeemers: list[tuple[Data, Data]] = dataclasses.field(default_factory=list)
    other_inputs: list[Constr] = dataclasses.field(default_factory=list)
    purpose: Constr | None = None

    def ledger(self) -> list[Channel]:
        return sorted(self.channels, key=lambda c: c.ref)

    def context(self, claim_hash: bytes) -> Constr:
        own = Constr(1, (claim_hash,))
        channels = self.ledger()
        inputs = [c.input() for c in channels]
        inputs.insert(sum(c.ref < FEE_REF for c in channels), fee_input())
        inputs = sorted([*inputs, *self.other_inputs], key=lambda i: i.fields[0].fields)
        payees = [c.payee for c in channels] if self.payees is None else self.payees
        first = len(self.payouts) if self.first_continuing is None else self.first_continuing
        redeemer = Constr(0, (payees, self.signatures, first))
        spends = [(Constr(1, (Constr(0, c.ref),)), CLAIM) for c in channels]
        withdraw = Constr(2, (own,))
        outputs = [*self.payouts, *self.continuing, out(address("submitter"), 9_000_000)]
        info = tx_info(
            inputs, outputs, [*spends, *self.other_redeemers, (withdraw, redeemer)],
            [own, *self.withdrawals], interval(None, self.upper), [],
        )  # fmt: skip
        return Constr(0, (info, redeemer, self.purpose or withdraw))


def honest() -> Batch:
    """Four channels in ledger order, the fee input among them: alice's and bob's to p1 (bob's
    closing after the batch's upper bound), carol's to p2, dave's to p1 again; p1 paid once
    for its three (output 0), p2 at output 1."""
    channels = [
        Channel("alice", "p1", ref(0)),
        Channel("bob", "p1", ref(1), claimed=2_000_000, closing_at=NOW, amount=9_000_000),
        Channel("carol", "p2", ref(2), amount=DEPOSIT, payee=1),
        Channel("dave", "p1", ref(3), claimed=1, amount=2, tokens=5),
    ]
    batch = Batch(channels, [])
    batch.payouts = [
        out(address(p), sum(c.amount - c.claimed for c in channels if c.provider == p))
        for p in ("p1", "p2")
    ]
    batch.signatures = [c.signature() for c in batch.ledger()]
    batch.continuing = [c.continuing() for c in batch.ledger()]
    return batch


def claim(reference: bool, attack: Callable[[Batch], object] | None) -> ScriptOutcome:
    """A claim script's run (the deployed one, or its reference) on the honest batch, broken by
    `attack` first."""
    script = claim_script(NETWORK, reference)
    batch = honest()
    if attack is not None:
        attack(batch)
    return evaluate(bytes(script), "withdraw", batch.context(plutus_script_hash(script).payload))


def channel(n: int, **changes: object) -> Callable[[Batch], None]:
    """Channel n changed, its continuing output and IOU made honestly for the change."""

    def change(batch: Batch) -> None:
        made = batch.channels[n]
        for name, value_ in changes.items():
            setattr(made, name, value_)
        i = batch.ledger().index(made)
        batch.continuing[i] = made.continuing()
        batch.signatures[i] = made.signature()

    return change


def continuing(n: int, output: Callable[[Channel], Constr]) -> Callable[[Batch], None]:
    def change(batch: Batch) -> None:
        batch.continuing[n] = output(batch.ledger()[n])

    return change


def resign(n: int, **signed: object) -> Callable[[Batch], None]:
    """Channel n's IOU signed over something else (iou_payload's arguments)."""

    def change(batch: Batch) -> None:
        batch.signatures[n] = batch.ledger()[n].signature(**signed)

    return change


def tampered(n: int, **fields: Data) -> Callable[[Batch], None]:
    """Channel n's continuing datum with fields changed."""
    return continuing(n, lambda c: c.continuing(**fields))


def moved(n: int, to: Constr) -> Callable[[Batch], None]:
    def output(c: Channel) -> Constr:
        made = c.continuing()
        return Constr(0, (to, *made.fields[1:]))

    return continuing(n, output)


def valued(n: int, lovelace: int, tokens: int) -> Callable[[Batch], None]:
    """Channel n's continuing output holding `lovelace` more and `tokens` (of POLICY) in all."""

    def output(c: Channel) -> Constr:
        made = c.continuing()
        held = value(c.lovelace - (c.amount - c.claimed) + lovelace, tokens)
        return Constr(0, (made.fields[0], held, *made.fields[2:]))

    return continuing(n, output)


def payout(index: int, to: Data | None = None, more: int = 0, datum: Data = NO_DATUM):
    def change(batch: Batch) -> None:
        was, held, _, _ = batch.payouts[index].fields
        lovelace = held.pairs[0][1].pairs[0][1] + more
        batch.payouts[index] = out(was if to is None else to, lovelace, datum)

    return change


def foreign_input(batch: Batch) -> None:
    """A channel's twin at another script (one that always succeeds), claimed too."""
    made = Channel("erin", "p1", (b"\x00" * 32, 0), script=OTHER_SCRIPT)
    batch.channels.append(made)
    batch.continuing.insert(0, made.continuing())
    batch.signatures.insert(0, made.signature(channel_hash=ScriptHash(OTHER_SCRIPT)))
    batch.payouts[0] = out(address("p1"), 5_000_000 + 12_000_001)


def shared_payout(batch: Batch) -> None:
    """Carol's channel (p2's) and p1's three all paid at output 0, holding only p1's."""
    batch.payees = [0, 0, 0, 0]


def double_counted(batch: Batch) -> None:
    """Output 0 holds one of p1's channels fewer than name it (counted for two)."""
    payout(0, more=-(9_000_000 - 2_000_000))(batch)


ONE_EACH = "one payee and signature per channel, and no script but channels and this withdrawal"
CLAIM_ATTACKS = {  # an honest batch broken one way, and the check that refuses it
    "a spending purpose": (
        lambda b: setattr(b, "purpose", Constr(1, (Constr(0, ref(0)), NOTHING))),
        "purpose",
    ),
    "a second withdrawal": (
        lambda b: b.withdrawals.append(Constr(0, (b"k" * 28,))),
        "one withdrawal, and an upper bound",
    ),
    "no upper bound": (lambda b: setattr(b, "upper", None), "one withdrawal, and an upper bound"),
    "no payees": (lambda b: setattr(b, "payees", []), "empty batch"),
    "an extra payee": (lambda b: setattr(b, "payees", [0, 0, 1, 0, 0]), ONE_EACH),
    "an extra signature": (lambda b: b.signatures.append(b"s" * 64), ONE_EACH),
    "an extra script in the redeemer map (a mint)": (
        lambda b: b.other_redeemers.append((Constr(0, (OTHER_SCRIPT,)), Constr(0))),
        ONE_EACH,
    ),
    "another script's input": (foreign_input, "one channel script"),
    "a replayed IOU (the amount already claimed)": (
        channel(0, claimed=5_000_000),
        "stale IOU",
    ),
    "an old IOU (below the amount claimed)": (
        channel(1, amount=1_000_000),
        "stale IOU",
    ),
    "an IOU of another channel": (resign(0, channel=b"\x01" * 28), "iou signature"),
    "an IOU for another network": (resign(2, network_id=1), "iou signature"),
    "an IOU for another channel script": (
        resign(3, channel_hash=ScriptHash(OTHER_SCRIPT)),
        "iou signature",
    ),
    "an IOU for another amount": (resign(0, amount=5_000_001), "iou signature"),
    "an IOU signed by another key": (
        lambda b: b.signatures.__setitem__(0, sign(key("mallory"), b"x")),
        "iou signature",
    ),
    "a claim above the deposit": (channel(2, amount=DEPOSIT + 1), "claim above the deposit"),
    "a claim after the close": (lambda b: setattr(b, "upper", NOW + 1), "claim after close"),
    "a continuing output a lovelace short": (valued(0, -1, 0), "continuing value"),
    "a continuing output a lovelace over": (valued(0, 1, 0), "continuing value"),
    "tokens slipped into a continuing output": (valued(0, 0, 1), "continuing value"),
    "tokens slipped out of a continuing output": (valued(3, 0, 0), "continuing value"),
    "a continuing output elsewhere (another stake)": (
        moved(0, ELSEWHERE),
        "continuing address",
    ),
    "a continuing output at the renter": (moved(1, address("bob")), "continuing address"),
    "another renter key in the continuing datum": (
        tampered(0, renter_vkey=vkey("mallory")),
        "continuing datum",
    ),
    "another payee in the continuing datum": (
        tampered(0, payee=b"\x01" * 28),
        "continuing datum",
    ),
    "other terms in the continuing datum": (
        tampered(2, terms=b"\x01" * 28),
        "continuing datum",
    ),
    "the close moved in the continuing datum": (
        tampered(1, closing_at=NOW + PERIOD),
        "continuing datum",
    ),
    "a close started in the continuing datum": (tampered(0, closing_at=NOW), "continuing datum"),
    "a continuing datum with a field more": (
        continuing(
            0,
            lambda c: Constr(
                0,
                (
                    c.address,
                    value(c.lovelace - c.amount),
                    Constr(2, (Constr(0, (*c.datum(claimed=c.amount).fields, 0)),)),
                    NOTHING,
                ),
            ),
        ),
        "continuing datum",
    ),
    "the payout to another address": (payout(1, to=address("mallory")), "one provider per payout"),
    "the payout to the provider's payment key alone": (
        payout(1, to=Constr(0, (address("p2").fields[0], NOTHING))),
        "one provider per payout",
    ),
    "two providers' channels paid at one output": (shared_payout, "one provider per payout"),
    "a payout counted for two channels": (double_counted, "provider payout"),
    "a payout a lovelace short": (payout(1, more=-1), "provider payout"),
    "a payout with a datum": (payout(0, datum=Constr(2, (b"tag",))), "provider payout"),
    "a continuing datum claiming more than the lovelace taken": (
        tampered(0, claimed=5_000_001),
        "continuing value",
    ),
    "a continuing output given a reference script (the renter's later fees rise)": (
        continuing(1, lambda c: with_script(c.continuing())),
        "continuing reference script",
    ),
}

UNTRACED = {  # shapes a builder never makes: refused by both (a builtin failing in one at least)
    "a payee past the provider outputs": lambda b: setattr(b, "payees", [0, 0, 2, 0]),
    "a negative payee": lambda b: setattr(b, "payees", [0, 0, -1, 0]),
    "a missing signature": lambda b: b.signatures.pop(),
    "a missing continuing output": lambda b: b.continuing.pop(),
    "first_continuing past the outputs": lambda b: setattr(b, "first_continuing", 99),
}


def no_channel_input(batch: Batch) -> None:
    """The honest payees, signatures and outputs, but no channel spent."""
    batch.payees = [c.payee for c in batch.ledger()]
    batch.channels = []


def datum_of(n: int, datum: Constr) -> Callable[[Batch], None]:
    """Channel n's continuing output carrying `datum` (an OutputDatum) instead."""
    return continuing(n, lambda c: Constr(0, (c.address, value(c.lovelace - c.amount), datum,
                                               NOTHING)))  # fmt: skip


CLAIM_ATTACKS.update(
    {
        "payees but no channel input": (no_channel_input, "no script input"),
        "a continuing output without a datum": (datum_of(0, NO_DATUM), "continuing datum"),
        "a continuing datum given as a hash": (
            datum_of(2, Constr(1, (b"h" * 32,))),
            "continuing datum",
        ),
    }
)


def test_both_claim_scripts_pass_the_honest_batch():
    for reference in (False, True):
        outcome = claim(reference, None)
        assert outcome.error is None, (reference, outcome.error, outcome.traces)


@pytest.mark.parametrize("name", CLAIM_ATTACKS)
def test_both_claim_scripts_refuse_a_broken_batch_with_the_same_trace(name):
    attack, trace = CLAIM_ATTACKS[name]
    deployed, readable = claim(False, attack), claim(True, attack)
    assert deployed.error is not None and trace in " ".join(deployed.traces), deployed
    assert readable.error is not None and readable.traces == deployed.traces, readable


@pytest.mark.parametrize("name", UNTRACED)
def test_both_claim_scripts_refuse_an_index_out_of_range(name):
    deployed, readable = claim(False, UNTRACED[name]), claim(True, UNTRACED[name])
    assert deployed.error is not None, deployed
    assert readable.error is not None, readable
    assert not (deployed.traces and readable.traces) or deployed.traces == readable.traces


def nudged(changes: list[tuple[str, int, int]]) -> Callable[[Batch], None]:
    """The honest batch with numbers moved: (what, which, by) of a payee, first_continuing,
    a provider output's lovelace, a continuing output's lovelace or claimed, or the upper
    bound."""

    def nudge(batch: Batch) -> None:
        batch.payees = batch.payees or [c.payee for c in batch.ledger()]
        for what, which, by in changes:
            n = which % len(batch.channels)
            if what == "payee":
                batch.payees[n] += by
            elif what == "first_continuing":
                batch.first_continuing = len(batch.payouts) + by
            elif what == "payout":
                payout(which % len(batch.payouts), more=by)(batch)
            elif what == "lovelace":
                valued(n, by, batch.ledger()[n].tokens)(batch)
            elif what == "claimed":
                tampered(n, claimed=batch.ledger()[n].amount + by)(batch)
            else:
                batch.upper = NOW + by

    return nudge


@pytest.mark.slow  # many batches through both scripts: seconds
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.sampled_from(
                ["payee", "first_continuing", "payout", "lovelace", "claimed", "upper"]
            ),
            st.integers(0, 9),
            st.integers(-2, 2),
        ),
        min_size=1,
        max_size=3,
    )
)
def test_both_claim_scripts_agree_on_any_nudge_of_the_honest_batch(changes):
    """Same outcome; the same trace where both trace."""
    deployed, readable = claim(False, nudged(changes)), claim(True, nudged(changes))
    assert (deployed.error is None) == (readable.error is None), (deployed, readable)
    if deployed.traces and readable.traces:
        assert deployed.traces == readable.traces


def memory_per_channel(reference: bool, sizes: range) -> tuple[float, float]:
    """The claim's memory fitted as a + b n over batches of n channels of one provider (each
    its own renter, full addresses): (a, b)."""
    points = []
    for n in sizes:
        channels = [Channel(f"r{i}", "p1", (i.to_bytes(32, "big"), 0)) for i in range(n)]
        batch = Batch(channels, [out(address("p1"), n * 5_000_000)])
        batch.signatures = [c.signature() for c in batch.ledger()]
        batch.continuing = [c.continuing() for c in batch.ledger()]
        script = claim_script(NETWORK, reference)
        outcome = evaluate(
            bytes(script), "withdraw", batch.context(plutus_script_hash(script).payload)
        )
        assert outcome.error is None, outcome
        points.append((n, outcome.memory))
    mean_n = sum(n for n, _ in points) / len(points)
    mean_m = sum(m for _, m in points) / len(points)
    slope = sum((n - mean_n) * (m - mean_m) for n, m in points) / sum(
        (n - mean_n) ** 2 for n, _ in points
    )
    return mean_m - slope * mean_n, slope


# ------------------------------------------------------------------------- channel spends


def signer(name: str) -> bytes:
    """The payment key hash of `name`'s key (also blake2b_224 of its vkey)."""
    return key(name).to_verification_key().hash().payload


@dataclasses.dataclass
class Spend:
    """A transaction spending one channel (alice's to p1) with the fee input beside it."""

    channel: Channel
    redeemer: Constr
    outputs: list[Constr]
    signatories: list[bytes] = dataclasses.field(default_factory=list)
    lower: int | None = None
    upper: int | None = None
    withdrawals: list[Constr] = dataclasses.field(default_factory=list)
    purpose: Constr | None = None

    def context(self) -> Constr:
        spent = Constr(0, self.channel.ref)
        info = tx_info(
            [self.channel.input(), fee_input()],
            [*self.outputs, out(address("submitter"), 9_000_000)],
            [(Constr(1, (spent,)), self.redeemer)], self.withdrawals,
            interval(self.lower, self.upper), self.signatories,
        )  # fmt: skip
        purpose = self.purpose or Constr(1, (spent, Constr(0, (self.channel.datum(),))))
        return Constr(0, (info, self.redeemer, purpose))


def kept(c: Channel, lovelace: int = 0, tokens: int | None = None, **datum: Data) -> Constr:
    """A continuing output of channel c: `lovelace` more, its datum with `datum` changed."""
    held = value(c.lovelace + lovelace, c.tokens if tokens is None else tokens)
    return Constr(0, (c.address, held, Constr(2, (c.datum(**datum),)), NOTHING))


A_SCRIPT = Constr(0, (b"\x5c" * 28,))  # Just a reference script's hash


def with_script(made: Constr) -> Constr:
    """Output `made` carrying a reference script (whose size raises the fee of every
    transaction that spends it)."""
    return Constr(0, (*made.fields[:3], A_SCRIPT))


def tagged(kind: int, channel_ref: tuple[bytes, int]) -> Constr:
    return Constr(2, (Constr(0, (kind, Constr(0, channel_ref))),))


def to_renter(c: Channel, kind: int, more: int = 0) -> Constr:
    return out(address(c.renter), c.lovelace + more, tagged(kind, c.ref))


def alice(**changes: object) -> Channel:
    return dataclasses.replace(Channel("alice", "p1", ref(0), claimed=3_000_000), **changes)


def spend(name: str) -> Spend:
    """The honest spend of alice's channel by redeemer `name`."""
    c = alice()
    terms = c.terms()
    if name == "claim":
        return Spend(c, CLAIM, [], withdrawals=[Constr(1, (CLAIM_HASH,))])
    if name == "top up":
        return Spend(c, Constr(1, (0, 0, terms)), [kept(c, 1_000_000)], [signer("alice")])
    if name == "start close":
        made = Spend(c, Constr(2, (0, 0, terms)), [kept(c, closing_at=NOW + PERIOD)])
        made.signatories, made.lower, made.upper = [signer("alice")], NOW - 600_000, NOW
        return made
    closing = alice(closing_at=NOW)
    if name == "drain":
        return Spend(closing, Constr(3, (0, 0, terms)), [to_renter(closing, 3)], lower=NOW + 1)
    if name == "provider end":
        return Spend(c, Constr(4, (0, 0, terms)), [to_renter(c, 4)], [signer("p1")])
    assert name == "mutual close"
    return Spend(c, Constr(5, (terms,)), [], [signer("alice"), signer("p1")])


SPENDS = ["claim", "top up", "start close", "drain", "provider end", "mutual close"]


def spent(name: str, attack: Callable[[Spend], object] | None = None) -> ScriptOutcome:
    made = spend(name)
    if attack is not None:
        attack(made)
    return evaluate(bytes(CHANNEL), "spend", made.context())


def put(**changes: object) -> Callable[[Spend], None]:
    return lambda s: [setattr(s, k, v) for k, v in changes.items()]


def redeemer(*fields: Data) -> Callable[[Spend], None]:
    return lambda s: setattr(s, "redeemer", Constr(s.redeemer.index, fields))


def output(made: Callable[[Channel], Constr]) -> Callable[[Spend], None]:
    return lambda s: setattr(s, "outputs", [made(s.channel)])


def holding(tokens: int) -> Callable[[Spend], None]:
    """The channel holds `tokens` (of POLICY)."""
    return lambda s: setattr(s.channel, "tokens", tokens)


def at(to: Constr, made: Constr) -> Constr:
    """Output `made` sent to address `to` instead."""
    return Constr(0, (to, *made.fields[1:]))


ALICE_KEY_ALONE = Constr(0, (address("alice").fields[0], NOTHING))


CLOSING = NOW + PERIOD
OTHER_TERMS = alice().terms(close_period_ms=1)
SPEND_ATTACKS = {  # (the honest spend, how it is broken, the trace that refuses it)
    "a claim without the claim script's withdrawal": (
        "claim",
        put(withdrawals=[Constr(1, (OTHER_SCRIPT,))]),
        "claim needs the batch withdrawal",
    ),
    "a claim with no withdrawal at all": (
        "claim",
        put(withdrawals=[]),
        "claim needs the batch withdrawal",
    ),
    "a top up naming another input": (
        "top up",
        redeemer(1, 0, alice().terms()),
        "own_input is not the spent",
    ),
    "a top up by a stranger (the renter did not sign)": (
        "top up",
        put(signatories=[signer("mallory")]),
        "renter signs",
    ),
    "a top up signed by the provider alone": (
        "top up",
        put(signatories=[signer("p1")]),
        "renter signs",
    ),
    "a top up with other terms": ("top up", redeemer(0, 0, OTHER_TERMS), "terms"),
    "a top up of a closing channel (it would void the provider's last claim)": (
        "top up",
        both(
            lambda s: setattr(s.channel, "closing_at", NOW),
            output(lambda c: kept(c, 1_000_000)),
        ),
        "already closing",
    ),
    "a top up giving the channel a reference script": (
        "top up",
        output(lambda c: with_script(kept(c, 1_000_000))),
        "continuing reference script",
    ),
    "a close giving the channel a reference script": (
        "start close",
        output(lambda c: with_script(kept(c, closing_at=CLOSING))),
        "continuing reference script",
    ),
    "a top up adding nothing": ("top up", output(lambda c: kept(c)), "top up adds"),
    "a top up moving the channel (another stake)": (
        "top up",
        output(lambda c: at(ELSEWHERE, kept(c, 1))),
        "continuing address",
    ),
    "a top up slipping tokens in": ("top up", output(lambda c: kept(c, 1, 1)), "continuing tokens"),
    "a top up slipping tokens out": (
        "top up",
        both(holding(3), output(lambda c: kept(c, 1_000_000, 0))),
        "continuing tokens",
    ),
    "a top up changing the renter key": (
        "top up",
        output(lambda c: kept(c, 1, renter_vkey=vkey("mallory"))),
        "continuing datum",
    ),
    "a top up changing the payee": (
        "top up",
        output(lambda c: kept(c, 1, payee=b"\x01" * 28)),
        "continuing datum",
    ),
    "a top up changing the terms": (
        "top up",
        output(lambda c: kept(c, 1, terms=b"\x01" * 28)),
        "continuing datum",
    ),
    "a top up lowering claimed": (
        "top up",
        output(lambda c: kept(c, 1, claimed=0)),
        "continuing datum",
    ),
    "a top up starting a close": (
        "top up",
        output(lambda c: kept(c, 1, closing_at=NOW)),
        "continuing datum",
    ),
    "a close with other terms": ("start close", redeemer(0, 0, OTHER_TERMS), "terms"),
    "a close the renter did not sign": ("start close", put(signatories=[]), "renter signs"),
    "a close of a closing channel": (
        "start close",
        lambda s: setattr(s.channel, "closing_at", NOW),
        "already closing",
    ),
    "a close with no upper bound": ("start close", put(upper=None), "finite upper bound"),
    "a close with a backdated bound (from the lower)": (
        "start close",
        output(lambda c: kept(c, closing_at=NOW - 600_000 + PERIOD)),
        "continuing datum",
    ),
    "a close with a shorter period": (
        "start close",
        output(lambda c: kept(c, closing_at=CLOSING - 1)),
        "continuing datum",
    ),
    "a close changing claimed": (
        "start close",
        output(lambda c: kept(c, claimed=c.claimed + 1, closing_at=CLOSING)),
        "continuing datum",
    ),
    "a close changing the renter key": (
        "start close",
        output(lambda c: kept(c, renter_vkey=vkey("mallory"), closing_at=CLOSING)),
        "continuing datum",
    ),
    "a close changing the terms": (
        "start close",
        output(lambda c: kept(c, terms=b"\x01" * 28, closing_at=CLOSING)),
        "continuing datum",
    ),
    "a close changing the payee": (
        "start close",
        output(lambda c: kept(c, payee=b"\x01" * 28, closing_at=CLOSING)),
        "continuing datum",
    ),
    "a close taking a lovelace": (
        "start close",
        output(lambda c: kept(c, -1, closing_at=CLOSING)),
        "close keeps the deposit",
    ),
    "a close slipping tokens in": (
        "start close",
        output(lambda c: kept(c, 0, 1, closing_at=CLOSING)),
        "continuing tokens",
    ),
    "a drain before closing_at": ("drain", put(lower=NOW), "close period not over"),
    "a drain with no lower bound": ("drain", put(lower=None), "finite lower bound"),
    "a drain of an open channel": (
        "drain",
        lambda s: setattr(s.channel, "closing_at", -1),
        "not closing",
    ),
    "a drain with other terms": ("drain", redeemer(0, 0, OTHER_TERMS), "terms"),
    "a drain to another address": (
        "drain",
        output(lambda c: at(address("mallory"), to_renter(c, 3))),
        "payout address",
    ),
    "a drain to the renter's payment key alone": (
        "drain",
        output(lambda c: at(ALICE_KEY_ALONE, to_renter(c, 3))),
        "payout address",
    ),
    "a drain a lovelace short": ("drain", output(lambda c: to_renter(c, 3, -1)), "payout amount"),
    "a drain tagged as an end": ("drain", output(lambda c: to_renter(c, 4)), "payout tag"),
    "a drain's payout counted for two channels (another channel's tag)": (
        "drain",
        output(lambda c: out(address(c.renter), c.lovelace, tagged(3, ref(5)))),
        "payout tag",
    ),
    "a drain's payout without a tag": (
        "drain",
        output(lambda c: out(address(c.renter), c.lovelace)),
        "payout tag",
    ),
    "an end the provider did not sign": (
        "provider end",
        put(signatories=[signer("alice")]),
        "provider signs",
    ),
    "an end with other terms": ("provider end", redeemer(0, 0, OTHER_TERMS), "terms"),
    "an end tagged as a drain": ("provider end", output(lambda c: to_renter(c, 3)), "payout tag"),
    "an end to another address": (
        "provider end",
        output(lambda c: at(address("p1"), to_renter(c, 4))),
        "payout address",
    ),
    "an end naming another input": ("provider end", redeemer(1, 0, alice().terms()), "own_input"),
    "a mutual close the provider did not sign": (
        "mutual close",
        put(signatories=[signer("alice")]),
        "both sign",
    ),
    "a mutual close the renter did not sign": (
        "mutual close",
        put(signatories=[signer("p1")]),
        "both sign",
    ),
    "a mutual close with other terms": ("mutual close", redeemer(OTHER_TERMS), "terms"),
    "a channel run as a withdrawal": (
        "top up",
        put(purpose=Constr(2, (Constr(1, (CHANNEL_HASH,)),))),
        "purpose",
    ),
}


@pytest.mark.parametrize("name", SPENDS)
def test_each_honest_spend_passes(name):
    outcome = spent(name)
    assert outcome.error is None, (outcome.error, outcome.traces)


@pytest.mark.parametrize("name", SPEND_ATTACKS)
def test_a_broken_spend_is_refused_by_its_trace(name):
    honest_name, attack, trace = SPEND_ATTACKS[name]
    outcome = spent(honest_name, attack)
    assert outcome.error is not None and trace in " ".join(outcome.traces), outcome


def test_the_deployed_claim_costs_under_100k_memory_per_channel_linearly():
    """Issue 22's target; the fit is exact (no term grows faster than the batch)."""
    fixed, per_channel = memory_per_channel(False, range(1, 7))
    assert per_channel < 100_000
    assert memory_per_channel(False, range(20, 41, 10)) == (fixed, per_channel)
