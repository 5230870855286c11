"""contracts.simplify keeps every result: the same programs succeed and fail, for less budget.

Differential: the escrow as OpShin compiles it and as simplified run on hand-built ledger
contexts (honest and broken); plus each rewrite on small programs.
"""

from __future__ import annotations

import functools
import sys

import cbor2
import pytest
from cbor2 import CBORTag
from opshin import builder
from opshin.ledger.api_v3 import Address, NoStakingCredential, PubKeyCredential, TxOutRef
from pycardano import PaymentSigningKey
from uplc import ast as U
from uplc import parse
from uplc.cost_model import (
    Budget,
    default_builtin_cost_model_plutus_v3,
    default_cek_machine_cost_model_plutus_v3,
)
from uplc.machine import Machine
from uplc.tools import apply

from contracts.onchain import BatchSettle, EscrowDatum, Payout, Receipt, Settle, SettleItem
from contracts.scripts import COMPILER_CONFIG, CONTRACTS, REPO_ROOT
from contracts.simplify import simplify

ESCROW_HASH = bytes([0xEE]) * 28
KEY = PaymentSigningKey.generate()
CONSUMER = Address(PubKeyCredential(bytes([1]) * 28), NoStakingCredential())
PROVIDER = Address(PubKeyCredential(bytes([2]) * 28), NoStakingCredential())


def run(program: U.Program, context) -> tuple[bool, Budget]:
    machine = Machine(
        Budget(10_000_000_000, 14_000_000),
        default_cek_machine_cost_model_plutus_v3(),
        default_builtin_cost_model_plutus_v3(),
    )
    result = machine.eval(apply(program, U.data_from_cbor(cbor2.dumps(context))))
    return isinstance(result.result, U.BuiltinUnit), result.cost


@functools.cache
def escrow_programs() -> tuple[U.Program, U.Program]:
    """The escrow (network 0 and a day's refund window applied) as OpShin compiles it, and
    simplified."""
    sys.path.insert(0, str(REPO_ROOT))
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 20_000))
    source = CONTRACTS["escrow"].source
    raw = builder._static_compile(
        source.read_text(), contract_file=str(source), config=COMPILER_CONFIG
    )
    network, window = (U.data_from_cbor(cbor2.dumps(n)) for n in (0, 86_400_000))
    return apply(apply(raw, network), window), apply(apply(simplify(raw), network), window)


def c(index: int, *fields):
    return CBORTag(121 + index, list(fields))


def data(value):
    return cbor2.loads(value.to_cbor())


def frozen(value):
    """A CBOR value usable as a map key."""
    if isinstance(value, CBORTag):
        return CBORTag(value.tag, tuple(frozen(v) for v in value.value))
    if isinstance(value, list):
        return tuple(frozen(v) for v in value)
    return value


def tx_out(address, lovelace: int, datum=None):
    inline = c(0) if datum is None else c(2, data(datum))
    return c(0, address, {b"": {b"": lovelace}}, inline, c(1))


def settle_context(mutate: str, purpose: str):
    """A one-escrow settle, broken as `mutate` says; run as `purpose` (spend or withdraw)."""
    ref = TxOutRef(bytes(32), 0)
    datum = EscrowDatum(CONSUMER, PROVIDER, KEY.to_verification_key().payload, 1_000, 100,
                        10_000, 1_000, bytes(32), 200_000)  # fmt: skip
    units = 150 if mutate == "too many units" else 50
    receipt = Receipt(b"UNCHAINED/receipt/v1", 0, ESCROW_HASH, ref, units, bytes(32), bytes(32))
    signature = KEY.sign(receipt.to_cbor())
    if mutate == "bad signature":
        signature = bytes([signature[0] ^ 1]) + signature[1:]
    escrow_address = c(0, c(1, ESCROW_HASH), c(1))
    fee_input = c(0, c(0, bytes([0xFF]) * 32, 0), tx_out(data(CONSUMER), 50_000_000))
    escrow_input = c(0, data(ref), tx_out(escrow_address, 10_000_000, datum))
    tag = Payout(1 if mutate == "wrong tag" else 0, ref)
    provider = CONSUMER if mutate == "wrong provider" else PROVIDER
    outputs = [
        tx_out(data(provider), 50_000, tag),
        tx_out(data(CONSUMER), 10_000_000 - 50_000 - 200_000, tag),
    ]
    items = [] if mutate == "no item" else [
        SettleItem(units, bytes(32), bytes(32), signature, 0, 1)
    ]  # fmt: skip
    upper = 20_000 if mutate == "late" else 10_500
    validity = c(0, c(0, c(0), c(1)), c(0, c(1, upper), c(0)))
    withdrawals = {} if mutate == "no withdrawal" else {frozen(c(1, ESCROW_HASH)): 0}
    tx = c(0, [escrow_input, fee_input], [], outputs, 0, {}, [], withdrawals, validity, [],
           {}, {}, bytes(32), {}, [], c(1), c(1))  # fmt: skip
    if purpose == "withdraw":
        return c(0, tx, data(BatchSettle(items)), c(2, c(1, ESCROW_HASH)))
    own_input = 1 if mutate == "wrong own_input" else 0
    return c(0, tx, data(Settle(own_input)), c(1, data(ref), c(0, data(datum))))


CASES = [
    ("honest", "withdraw", True),
    ("honest", "spend", True),
    ("bad signature", "withdraw", False),
    ("too many units", "withdraw", False),
    ("wrong tag", "withdraw", False),
    ("wrong provider", "withdraw", False),
    ("no item", "withdraw", False),
    ("late", "withdraw", False),
    ("no withdrawal", "spend", False),
    ("wrong own_input", "spend", False),
]


@pytest.mark.slow  # the escrow compiled by OpShin once: seconds
@pytest.mark.parametrize(("mutate", "purpose", "passes"), CASES)
def test_simplified_escrow_agrees_with_opshin_and_costs_less(mutate, purpose, passes):
    raw, simplified = escrow_programs()
    context = settle_context(mutate, purpose)
    raw_ok, raw_cost = run(raw, context)
    ok, cost = run(simplified, context)
    assert raw_ok == ok == passes
    if passes:
        assert cost.memory < raw_cost.memory and cost.cpu < raw_cost.cpu


def program(text: str) -> U.Program:
    return parse(f"(program 1.0.0 {text})")


@pytest.mark.parametrize(
    ("before", "after"),
    [
        # a dead pure binding goes; a trivial one is substituted
        ("[(lam a (con integer 1)) (delay (error))]", "(con integer 1)"),
        ("[(lam a [(builtin iData) a]) (con integer 2)]", "[(builtin iData) (con integer 2)]"),
        # a value read once, strictly, moves to its use
        (
            "[(lam x [(builtin iData) x]) [[(builtin addInteger) (con integer 1)] "
            "(con integer 2)]]",
            "[(builtin iData) [[(builtin addInteger) (con integer 1)] (con integer 2)]]",
        ),
        ("(force (delay (con integer 3)))", "(con integer 3)"),
        (
            "[[[(force (builtin ifThenElse)) [[[(force (builtin ifThenElse)) "
            "[[[(force (builtin ifThenElse)) (con bool True)] (con bool False)] "
            "(con bool True)]] (con bool False)] (con bool True)]] (con integer 1)] "
            "(con integer 0)]",
            "[[[(force (builtin ifThenElse)) (con bool True)] (con integer 1)] (con integer 0)]",
        ),
    ],
)
def test_rewrites(before, after):
    assert simplify(program(before)).term.dumps() == program(after).term.dumps()


@pytest.mark.parametrize(
    "kept",
    [
        # read twice, or under a lambda: evaluating it there would change the cost or result
        "[(lam x [[(builtin addInteger) x] x]) [[(builtin addInteger) (con integer 1)] "
        "(con integer 2)]]",
        "[(lam x (lam y x)) [[(builtin addInteger) (con integer 1)] (con integer 2)]]",
        # an unread failing argument still fails
        "[(lam x (con integer 1)) (error)]",
    ],
)
def test_bindings_that_must_stay(kept):
    assert simplify(program(kept)).term.dumps() == program(kept).term.dumps()


def test_recursion_is_not_unrolled():
    """A self-applied function is a loop; duplicating it into itself must not go on forever."""
    loop = (
        "[(lam f [[f f] (con integer 3)]) (lam self (lam n (force [[[(force (builtin "
        "ifThenElse)) [[(builtin equalsInteger) n] (con integer 0)]] (delay (con unit ()))] "
        "(delay [[self self] [[(builtin subtractInteger) n] (con integer 1)]])])))]"
    )
    simplified = simplify(program(loop))
    machine = Machine(
        Budget(10**10, 10**7),
        default_cek_machine_cost_model_plutus_v3(),
        default_builtin_cost_model_plutus_v3(),
    )
    assert isinstance(machine.eval(simplified).result, U.BuiltinUnit)


def map_list(k: str) -> str:
    """OpShin's MapList(xs, f, default), its binders suffixed with k, the loop from w."""
    return (
        f"(lam xs{k} (lam f{k} (lam d{k} [[w (lam self{k} (lam l{k} (force [[[(force (force "
        f"(builtin chooseList))) l{k}] (delay (force d{k}))] (delay [[(force (builtin mkCons)) "
        f"[f{k} [(force (builtin headList)) l{k}]]] [[self{k} self{k}] [(force (builtin "
        f"tailList)) l{k}]]])])))] xs{k}])))"
    )


def test_identity_list_map_is_the_list():
    """OpShin's cast of list Data to a typed list (a map of the identity) becomes the list."""
    xs = "[(builtin unListData) (con data (List [I 1, I 2, I 3]))]"
    empty = "(delay (con (list data) []))"
    identity = f"[[[m [[[m {xs}] (lam z z)] {empty}]] (lam u u)] {empty}]"
    increment = (
        "(lam y [(builtin iData) [[(builtin addInteger) (con integer 1)] [(builtin unIData) y]]])"
    )
    other = f"[[[n [[[n {xs}] {increment}] {empty}]] (lam v v)] {empty}]"
    text = (
        f"[(lam w [(lam m [(lam n [[(builtin mkPairData) [(builtin listData) {identity}]] "
        f"[(builtin listData) {other}]]) {map_list('2')}]) "
        f"{map_list('1')}]) (lam x [x x])]"
    )
    before, after = program(text), simplify(program(text))
    dumped = after.term.dumps()
    # the identity maps went; n maps a non-identity, so its maps stay
    assert dumped.startswith(f"[[(builtin mkPairData) [(builtin listData) {xs}]]")
    assert "mkCons" in dumped

    def result(p):
        machine = Machine(
            Budget(10**10, 10**7),
            default_cek_machine_cost_model_plutus_v3(),
            default_builtin_cost_model_plutus_v3(),
        )
        outcome = machine.eval(p)
        return outcome.result.dumps(), outcome.cost.memory

    (value, memory), (raw_value, raw_memory) = result(after), result(before)
    assert value == raw_value and memory < raw_memory
