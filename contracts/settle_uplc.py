"""The batch settle script, written by hand in pluthon: the one deployed (PROTOCOL.md).

`contracts/settle.py` (OpShin) is the readable reference of the same checks, and the tests run
the same vectors against both (tests/protocol/test_settle_attacks.py). OpShin's calling
convention (every call passes every live local and the globals the callee reads) made that
version cost about 250K memory per escrow; here the walk over the inputs is one recursive
function whose constants are closed over, so an escrow costs a few hundred machine steps:
its fields read once, its checks as eager `ifThenElse` chains (comparisons cannot fail),
group 0 (the builder puts the largest group first) accumulated in the walk's own arguments,
and each redeemer tailed off as its escrow passes.

Program: `\\network_id (Data) -> \\context (Data) -> ()`, applied to its Data parameter the
way `contracts.artifacts.apply_parameters` applies OpShin's.
"""

from __future__ import annotations

from pluthon import (
    AddInteger,
    Apply,
    BData,
    ByteString,
    ConstrData,
    EqualsData,
    EqualsInteger,
    Force,
    FstPair,
    HeadList,
    IData,
    Integer,
    Ite,
    LessThanEqualsInteger,
    LessThanInteger,
    ListData,
    MkCons,
    MultiplyInteger,
    NullList,
    PLambda,
    PLet,
    PVar,
    SerialiseData,
    SndPair,
    SubtractInteger,
    TailList,
    TraceError,
    UnBData,
    UnConstrData,
    UnIData,
    Unit,
    UnListData,
    UnMapData,
    UPLCConstant,
    VerifyEd25519Signature,
)
from pluthon.pluthon_ast import AST, BuiltIn
from uplc import ast as U

CLAIM_DOMAIN = b"UNCHAINED/claim/v1"
NO_DATUM = UPLCConstant(U.PlutusConstr(0, []))  # NoOutputDatum
NOBODY = UPLCConstant(U.PlutusInteger(0))  # a run's consumer before the first: no address
EMPTY = UPLCConstant(U.BuiltinList([], U.PlutusData()))  # [] of Data


def V(name: str) -> AST:
    return PVar(name)


def fields(x: AST) -> AST:
    return SndPair(UnConstrData(x))


def tag(x: AST) -> AST:
    return FstPair(UnConstrData(x))


def tail(x: AST, n: int = 1) -> AST:
    for _ in range(n):
        x = TailList(x)
    return x


def nth(x: AST, n: int) -> AST:
    return HeadList(tail(x, n))


def eager_and(*conditions: AST) -> AST:
    """All of `conditions`, each evaluated (only for ones that cannot fail: comparisons)."""
    result = conditions[-1]
    for condition in reversed(conditions[:-1]):
        result = Apply(Force(BuiltIn(U.BuiltInFun.IfThenElse)), condition, result, _false())
    return result


def _false() -> AST:
    return UPLCConstant(U.BuiltinBool(False))


def not_null(xs: AST) -> AST:
    return Apply(
        Force(BuiltIn(U.BuiltInFun.IfThenElse)), NullList(xs), _false(),
        UPLCConstant(U.BuiltinBool(True)),
    )  # fmt: skip


def check(condition: AST, message: str, then: AST) -> AST:
    """`then` if `condition`, else fail with the trace `message` (as OpShin's asserts do)."""
    return Ite(condition, then, TraceError(message))


def let(bindings: list[tuple[str, AST]], body: AST) -> AST:
    return PLet(bindings, body)


def recursive(params: list[str], body: AST) -> AST:
    """A function that calls itself as `call(V("self"), ...)`: `\\self params -> body`."""
    return PLambda(["self", *params], body)


def call(function: AST, *args: AST) -> AST:
    """Call a `recursive` function (it takes itself first)."""
    return Apply(function, function, *args)


def lovelace(value: AST) -> AST:
    """The lovelace of a ledger Value Data (ADA is always its first entry)."""
    return UnIData(SndPair(HeadList(UnMapData(SndPair(HeadList(UnMapData(value)))))))


def paid(out: AST, address: AST, amount: AST) -> AST:
    """Whether the output fields `out` pay at least `amount` to `address`, with no datum."""
    return eager_and(
        EqualsData(HeadList(out), address),
        LessThanEqualsInteger(amount, lovelace(nth(out, 1))),
        EqualsData(nth(out, 2), NO_DATUM),
    )


def refund_run() -> AST:
    """\\refunds consumer total -> the outputs after the run's refund (checked if owed)."""
    return PLambda(
        ["refunds", "consumer", "total"],
        Ite(
            LessThanInteger(Integer(0), V("total")),
            check(
                paid(fields(HeadList(V("refunds"))), V("consumer"), V("total")),
                "consumer refund",
                TailList(V("refunds")),
            ),
            V("refunds"),
        ),
    )


def add_to_group() -> AST:
    """\\self accs idents g vkey provider due ref units -> the accumulators of groups 1.. with
    the escrow added to group g's: [I sum, L claims], each group's key and address beside."""
    ident = UnListData(HeadList(V("idents")))
    acc = UnListData(HeadList(V("accs")))
    updated = ListData(
        MkCons(
            IData(AddInteger(UnIData(HeadList(acc)), V("due"))),
            MkCons(
                ListData(MkCons(V("ref"), MkCons(V("units"), UnListData(nth(acc, 1))))),
                tail(acc, 2),
            ),
        )
    )
    return recursive(
        ["accs", "idents", "g", "vkey", "provider", "due", "ref", "units"],
        Ite(
            EqualsInteger(V("g"), Integer(0)),
            check(
                eager_and(
                    EqualsData(V("vkey"), HeadList(ident)),
                    _due_paid_to(nth(ident, 1)),
                ),
                "one provider per group",
                MkCons(updated, TailList(V("accs"))),
            ),
            MkCons(
                HeadList(V("accs")),
                call(
                    V("self"),
                    TailList(V("accs")),
                    TailList(V("idents")),
                    SubtractInteger(V("g"), Integer(1)),
                    V("vkey"),
                    V("provider"),
                    V("due"),
                    V("ref"),
                    V("units"),
                ),
            ),
        ),
    )


def _due_paid_to(address: AST) -> AST:
    """An escrow earning anything is paid to its own provider address."""
    return Apply(
        Force(BuiltIn(U.BuiltInFun.IfThenElse)),
        EqualsInteger(V("due"), Integer(0)),
        UPLCConstant(U.BuiltinBool(True)),
        EqualsData(V("provider"), address),
    )


def claim_message(note: AST, claims: AST) -> AST:
    """serialise_data(Claim): C0[domain, network_id, settle_hash, note, claims]."""
    return SerialiseData(
        ConstrData(
            Integer(0),
            MkCons(
                BData(ByteString(CLAIM_DOMAIN)),
                MkCons(
                    IData(V("network")),
                    MkCons(
                        BData(V("settle_hash")),
                        MkCons(note, MkCons(ListData(claims), EMPTY)),
                    ),
                ),
            ),
        )
    )


def check_group() -> AST:
    """\\spec total claims previous -> the group's output index (or `previous` when it is owed
    nothing): its claim signed by its key, its sum paid in its output, in increasing order and
    before the refunds."""
    spec = fields(V("spec"))
    out = UnIData(nth(V("spec_f"), 2))
    return PLambda(
        ["spec", "total", "claims", "previous"],
        let(
            [("spec_f", spec), ("out", out)],
            check(
                eager_and(
                    not_null(V("claims")),
                    VerifyEd25519Signature(
                        UnBData(nth(V("spec_f"), 3)),
                        claim_message(HeadList(V("spec_f")), V("claims")),
                        UnBData(nth(V("spec_f"), 1)),
                    ),
                ),
                "claim signature",
                Ite(
                    LessThanInteger(V("out"), Integer(0)),
                    check(EqualsInteger(V("total"), Integer(0)), "provider payout", V("previous")),
                    check(
                        eager_and(
                            LessThanInteger(V("previous"), V("out")),
                            LessThanInteger(V("out"), V("first_refund")),
                        ),
                        "provider output order",
                        check(
                            _paid_sum(fields(index_access(V("outputs"), V("out"))), V("total")),
                            "provider payout",
                            V("out"),
                        ),
                    ),
                ),
            ),
        ),
    )


def _paid_sum(out: AST, total: AST) -> AST:
    """The group's output (its address was read before the walk) holds the sum, no datum."""
    return eager_and(
        LessThanEqualsInteger(total, lovelace(nth(out, 1))),
        EqualsData(nth(out, 2), NO_DATUM),
    )


def index_access(xs: AST, i: AST) -> AST:
    return Apply(_index_access(), _index_access(), xs, i)


def _index_access() -> AST:
    return recursive(
        ["xs", "i"],
        Ite(
            EqualsInteger(V("i"), Integer(0)),
            HeadList(V("xs")),
            call(V("self"), TailList(V("xs")), SubtractInteger(V("i"), Integer(1))),
        ),
    )


def check_rest() -> AST:
    """\\self specs accs previous -> () once every group 1.. is checked."""
    acc = UnListData(HeadList(V("accs")))
    return recursive(
        ["specs", "accs", "previous"],
        Ite(
            NullList(V("specs")),
            Unit(),
            call(
                V("self"),
                TailList(V("specs")),
                TailList(V("accs")),
                Apply(
                    V("check_group"),
                    HeadList(V("specs")),
                    UnIData(HeadList(acc)),
                    UnListData(nth(acc, 1)),
                    V("previous"),
                ),
            ),
        ),
    )


def identities() -> AST:
    """\\self specs -> each group's [key, address] (list Data), the address that of its output
    (NOBODY for a group owed nothing: then none of its escrows may earn anything)."""
    spec = fields(HeadList(V("specs")))
    return recursive(
        ["specs"],
        Ite(
            NullList(V("specs")),
            EMPTY,
            MkCons(
                ListData(MkCons(nth(spec, 3), MkCons(_address(UnIData(nth(spec, 2))), EMPTY))),
                call(V("self"), TailList(V("specs"))),
            ),
        ),
    )


def _address(out: AST) -> AST:
    return let(
        [("i", out)],
        Ite(
            LessThanInteger(V("i"), Integer(0)),
            NOBODY,
            HeadList(fields(index_access(V("outputs"), V("i")))),
        ),
    )


def empty_accs() -> AST:
    """\\self specs -> one empty accumulator [I 0, L []] per group."""
    empty = ListData(MkCons(IData(Integer(0)), MkCons(ListData(EMPTY), EMPTY)))
    return recursive(
        ["specs"],
        Ite(
            NullList(V("specs")),
            EMPTY,
            MkCons(empty, call(V("self"), TailList(V("specs")))),
        ),
    )


def first_script() -> AST:
    """\\self inputs -> the payment credential of the first script input."""
    credential = HeadList(fields(HeadList(fields(nth(fields(HeadList(V("inputs"))), 1)))))
    return recursive(
        ["inputs"],
        let(
            [("credential", credential)],
            Ite(
                EqualsInteger(tag(V("credential")), Integer(1)),
                V("credential"),
                call(V("self"), TailList(V("inputs"))),
            ),
        ),
    )


WALK_STATE = ["inputs", "items", "reds", "sum0", "claims0", "accs", "consumer", "total", "refunds"]


def walk() -> AST:
    """\\self inputs items reds sum0 claims0 accs consumer total refunds -> (): every escrow
    input checked, its claim added to its group, its refund to its consumer's run."""
    return recursive(
        WALK_STATE,
        Ite(
            NullList(V("inputs")),
            _finish(),
            let(
                [
                    ("in_f", fields(HeadList(V("inputs")))),
                    ("out_f", fields(nth(V("in_f"), 1))),
                    ("credential", HeadList(fields(HeadList(V("out_f"))))),
                ],
                Ite(
                    EqualsData(V("credential"), V("script")),
                    _escrow(),
                    check(
                        EqualsInteger(tag(V("credential")), Integer(0)),
                        "one escrow script",
                        call(
                            V("self"),
                            TailList(V("inputs")),
                            *[V(name) for name in WALK_STATE[1:]],
                        ),
                    ),
                ),
            ),
        ),
    )


def _escrow() -> AST:
    datum = fields(HeadList(fields(nth(V("out_f"), 2))))  # OutputDatum C2[d]: d's fields
    return let(
        [
            ("d", datum),
            ("d3", tail(V("d"), 3)),
            ("d5", tail(V("d3"), 2)),
            ("price", UnIData(HeadList(V("d3")))),
            ("units_d", HeadList(V("items"))),
            ("units", UnIData(V("units_d"))),
            ("items1", TailList(V("items"))),
            ("g", UnIData(HeadList(V("items1")))),
            ("vkey", nth(V("d"), 2)),
            ("provider", nth(V("d"), 1)),
            ("escrow_consumer", HeadList(V("d"))),
        ],
        check(
            eager_and(
                LessThanEqualsInteger(Integer(0), V("units")),
                LessThanEqualsInteger(V("units"), UnIData(nth(V("d3"), 1))),
                LessThanEqualsInteger(Integer(0), V("price")),
                LessThanEqualsInteger(
                    V("latest"), AddInteger(UnIData(HeadList(V("d5"))), UnIData(nth(V("d5"), 1)))
                ),
            ),
            "units or time",
            let(
                [
                    ("due", MultiplyInteger(V("price"), V("units"))),
                    (
                        "rest",
                        SubtractInteger(
                            SubtractInteger(lovelace(nth(V("out_f"), 1)), V("due")),
                            UnIData(nth(V("d5"), 3)),
                        ),
                    ),
                    (
                        "owed",
                        Ite(LessThanInteger(Integer(0), V("rest")), V("rest"), Integer(0)),
                    ),
                    ("ref", HeadList(V("in_f"))),
                ],
                Ite(
                    EqualsInteger(V("g"), Integer(0)),
                    check(
                        eager_and(EqualsData(V("vkey"), V("vkey0")), _due_paid_to(V("addr0"))),
                        "one provider per group",
                        _next(
                            AddInteger(V("sum0"), V("due")),
                            MkCons(V("ref"), MkCons(V("units_d"), V("claims0"))),
                            V("accs"),
                        ),
                    ),
                    _next(
                        V("sum0"),
                        V("claims0"),
                        call(
                            V("add_to_group"),
                            V("accs"),
                            V("idents"),
                            SubtractInteger(V("g"), Integer(1)),
                            V("vkey"),
                            V("provider"),
                            V("due"),
                            V("ref"),
                            V("units_d"),
                        ),
                    ),
                ),
            ),
        ),
    )


def _next(sum0: AST, claims0: AST, accs: AST) -> AST:
    """The walk's next step: the escrow's refund joins its consumer's run, or starts one."""
    rest = [TailList(V("inputs")), tail(V("items1"), 1), TailList(V("reds")), sum0, claims0, accs]
    return Ite(
        EqualsData(V("escrow_consumer"), V("consumer")),
        call(V("self"), *rest, V("consumer"), AddInteger(V("total"), V("owed")), V("refunds")),
        call(
            V("self"),
            *rest,
            V("escrow_consumer"),
            V("owed"),
            Apply(V("refund_run"), V("refunds"), V("consumer"), V("total")),
        ),
    )


def _finish() -> AST:
    """After the last input: the last run refunded, every item and redeemer used, the groups
    signed and paid."""
    return let(
        [("_r", Apply(V("refund_run"), V("refunds"), V("consumer"), V("total")))],
        check(
            eager_and(NullList(V("items")), NullList(TailList(V("reds")))),
            "one item per escrow input, and no script but escrows and this withdrawal",
            let(
                [
                    (
                        "previous",
                        Apply(
                            V("check_group"),
                            HeadList(V("specs")),
                            V("sum0"),
                            V("claims0"),
                            Integer(-1),
                        ),
                    )
                ],
                call(V("check_rest"), TailList(V("specs")), V("accs"), V("previous")),
            ),
        ),
    )


def program() -> AST:
    """The settle script's term, before its network_id parameter is applied."""
    tx = fields(HeadList(V("ctx_f")))
    upper = HeadList(fields(nth(fields(nth(V("tx"), 7)), 1)))  # Interval's upper: Extended
    return PLambda(
        ["network_d", "ctx"],
        let(
            [
                ("network", UnIData(V("network_d"))),
                ("ctx_f", fields(V("ctx"))),
                ("purpose", nth(V("ctx_f"), 2)),
            ],
            check(
                EqualsInteger(tag(V("purpose")), Integer(2)),
                "purpose",
                let(
                    [
                        ("settle_hash", UnBData(HeadList(fields(HeadList(fields(V("purpose"))))))),
                        ("tx", tx),
                        ("upper", upper),
                    ],
                    check(
                        eager_and(
                            NullList(TailList(UnMapData(nth(V("tx"), 6)))),
                            EqualsInteger(tag(V("upper")), Integer(1)),
                        ),
                        "one withdrawal, and an upper bound",
                        _body(),
                    ),
                ),
            ),
        ),
    )


def _body() -> AST:
    redeemer = fields(nth(V("ctx_f"), 1))
    return let(
        [
            ("latest", UnIData(HeadList(fields(V("upper"))))),
            ("redeemer_f", redeemer),
            ("items", UnListData(HeadList(V("redeemer_f")))),
            ("specs", UnListData(nth(V("redeemer_f"), 1))),
            ("first_refund", UnIData(nth(V("redeemer_f"), 2))),
            ("outputs", UnListData(nth(V("tx"), 2))),
            ("inputs", UnListData(HeadList(V("tx")))),
            ("refund_run", refund_run()),
            ("add_to_group", add_to_group()),
            ("check_group", check_group()),
            ("check_rest", check_rest()),
            ("idents_all", call(identities(), V("specs"))),
            ("ident0", UnListData(HeadList(V("idents_all")))),
            ("vkey0", HeadList(V("ident0"))),
            ("addr0", nth(V("ident0"), 1)),
            ("idents", TailList(V("idents_all"))),
            ("script", call(first_script(), V("inputs"))),
            ("walk", walk()),
        ],
        check(
            not_null(V("items")),
            "empty batch",
            call(
                V("walk"),
                V("inputs"),
                V("items"),
                UnMapData(nth(V("tx"), 9)),
                Integer(0),
                EMPTY,
                call(empty_accs(), TailList(V("specs"))),
                NOBODY,
                Integer(0),
                tail_n(UnListData(nth(V("tx"), 2)), V("first_refund")),
            ),
        ),
    )


def tail_n(xs: AST, n: AST) -> AST:
    """`xs` without its first n elements (n >= 0)."""
    drop = recursive(
        ["xs", "n"],
        Ite(
            EqualsInteger(V("n"), Integer(0)),
            V("xs"),
            call(V("self"), TailList(V("xs")), SubtractInteger(V("n"), Integer(1))),
        ),
    )
    return call(drop, xs, n)


def build() -> U.Program:
    """The program, compiled with pluthon's -O3, traces kept (contracts.simplify is for
    OpShin's calling convention, which this program does not have), its forced builtins
    hoisted."""
    from pluthon import Program, compile
    from pluthon.compiler_config import OPT_O3_CONFIG

    config = OPT_O3_CONFIG.update(remove_trace=False, constant_folding_keep_traces=True)
    compiled = compile(Program((1, 1, 0), program()), config)
    return U.Program(compiled.version, hoist_forced_builtins(compiled.term))


def hoist_forced_builtins(term: U.AST) -> U.AST:
    """`term` with each `(force (builtin b))` and `(force (force (builtin b)))` bound once
    around it: a variable costs one machine step, the forces and the builtin two or three,
    and the walk reads dozens per escrow."""
    found: dict[str, U.AST] = {}

    def forced(node: U.AST) -> str | None:
        depth, inner = 0, node
        while isinstance(inner, U.Force):
            depth, inner = depth + 1, inner.term
        if depth and isinstance(inner, U.BuiltIn):
            name = f"f{depth}_{inner.builtin.name}"
            found[name] = node
            return name
        return None

    def visit(node: U.AST) -> U.AST:
        name = forced(node)
        if name is not None:
            return U.Variable(name)
        if isinstance(node, U.Apply):
            return U.Apply(visit(node.f), visit(node.x))
        if isinstance(node, U.Lambda):
            return U.Lambda(node.var_name, visit(node.term))
        if isinstance(node, U.Delay):
            return U.Delay(visit(node.term))
        if isinstance(node, U.Force):
            return U.Force(visit(node.term))
        return node

    body = visit(term)
    for name in reversed(found):
        body = U.Lambda(name, body)
    for value in found.values():
        body = U.Apply(body, value)
    return body
