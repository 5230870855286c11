"""contracts.simplify keeps every result: the same programs succeed and fail, for less budget.

Differential: the OpShin validators as compiled and as simplified, run on hand-built ledger
contexts, honest and broken: the escrow's Settle spend, and the settle reference on every
vector of test_settle_scripts (same outcome, same trace). Plus each rewrite on small programs.
"""

from __future__ import annotations

import functools
import sys

import cbor2
import pytest
from opshin import builder
from uplc import ast as U
from uplc import parse
from uplc.cost_model import (
    Budget,
    default_builtin_cost_model_plutus_v3,
    default_cek_machine_cost_model_plutus_v3,
)
from uplc.machine import Machine
from uplc.tools import apply

from contracts.scripts import COMPILER_CONFIG, CONTRACTS, REPO_ROOT
from contracts.simplify import simplify
from devnet.phase2 import plutus_data
from devnet.script_context import FALSE, NOTHING, Constr, DataMap, encode_data
from tests.contracts.test_settle_scripts import (
    TRACED,
    UNTRACED,
    Batch,
    Escrow,
    address,
    credential,
    honest,
    out,
    ref,
)

SETTLE_HASH = bytes([0x5E]) * 28


def run(program: U.Program, context: bytes) -> tuple[bool, tuple[str, ...], Budget]:
    """Whether the program returns unit, its traces and its cost."""
    machine = Machine(
        Budget(10_000_000_000, 14_000_000),
        default_cek_machine_cost_model_plutus_v3(),
        default_builtin_cost_model_plutus_v3(),
    )
    (argument,) = cbor2.loads(context)
    result = machine.eval(apply(program, plutus_data(argument)))
    return isinstance(result.result, U.BuiltinUnit), tuple(result.logs), result.cost


@functools.cache
def programs(name: str, *parameters: int | bytes) -> tuple[U.Program, U.Program]:
    """The OpShin validator `name` with `parameters` applied, as compiled and simplified."""
    sys.path.insert(0, str(REPO_ROOT))
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 20_000))
    source = CONTRACTS[name].source
    raw = builder._static_compile(
        source.read_text(), contract_file=str(source), config=COMPILER_CONFIG
    )
    simplified = simplify(raw)
    for value in parameters:
        data = U.data_from_cbor(cbor2.dumps(value))
        raw, simplified = apply(raw, data), apply(simplified, data)
    return raw, simplified


def spend_context(withdrawals: list[Constr]) -> bytes:
    """An escrow spent with Settle beside these withdrawals (credentials)."""
    escrow = Escrow("alice", "p1", 1, 0, 0, ref(0))
    spent = escrow.info()
    always = Constr(0, (Constr(0, (Constr(0), Constr(1))), Constr(0, (Constr(2), FALSE))))
    info = Constr(
        0,
        (
            [spent], [], [out(address("alice"), 5_000_000)], 200_000, DataMap(()), [],
            DataMap(tuple((w, 0) for w in withdrawals)), always, [], DataMap(()), DataMap(()),
            bytes(32), DataMap(()), [], NOTHING, NOTHING,
        ),
    )  # fmt: skip
    datum = spent.fields[1].fields[2].fields[0]
    purpose = Constr(1, (Constr(0, ref(0)), Constr(0, (datum,))))
    return encode_data([Constr(0, (info, Constr(0), purpose))])


SPENDS = [
    ([credential(SETTLE_HASH)], True),
    ([], False),
    ([credential(bytes(28))], False),
    ([Constr(0, (bytes(28),)), credential(SETTLE_HASH)], False),
]


@pytest.mark.slow  # the escrow compiled by OpShin once: seconds
@pytest.mark.parametrize(("withdrawals", "passes"), SPENDS)
def test_simplified_escrow_agrees_with_opshin_and_costs_less(withdrawals, passes):
    raw, simplified = programs("escrow", SETTLE_HASH, 86_400_000)
    context = spend_context(withdrawals)
    raw_ok, _, raw_cost = run(raw, context)
    ok, _, cost = run(simplified, context)
    assert raw_ok == ok == passes
    if passes:
        assert cost.memory < raw_cost.memory and cost.cpu < raw_cost.cpu


def settle_context(attack) -> bytes:
    batch: Batch = honest(SETTLE_HASH)
    if attack is not None:
        attack(batch)
    return batch.context()


@pytest.mark.slow  # the settle reference compiled by OpShin once: tens of seconds
@pytest.mark.parametrize("name", ["honest", *TRACED, *UNTRACED])
def test_simplified_settle_reference_agrees_with_opshin(name):
    raw, simplified = programs("settle_reference", 0)
    attack = TRACED[name][0] if name in TRACED else UNTRACED.get(name)
    context = settle_context(attack)
    raw_ok, raw_logs, raw_cost = run(raw, context)
    ok, logs, cost = run(simplified, context)
    assert (ok, logs) == (raw_ok, raw_logs)
    assert ok == (name == "honest")
    if ok:
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


def test_recursion_through_a_delayed_self_is_not_unrolled():
    """OpShin's recursion: `[(force self) self]`, the function bound delayed (a small one,
    duplicated, grew the settle reference by a copy of itself on every pass, for ever)."""
    loop = (
        "[(lam f [[(force f) f] (con integer 3)]) (delay (lam self (lam n (force [[[(force "
        "(builtin ifThenElse)) [[(builtin equalsInteger) n] (con integer 0)]] (delay (con "
        "unit ()))] (delay [[(force self) self] [[(builtin subtractInteger) n] (con integer "
        "1)]])]))))]"
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
