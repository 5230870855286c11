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

from collections.abc import Callable

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
    """\refunds consumer total -> the outputs after the run's refund (checked if owed)."""
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


def add_to_claim() -> AST:
    r"""\self accs specs c vkey ref units -> the accumulators of claims 1.. (each its claims
    list, as list Data) with the escrow added to claim c's, whose key must be its provider's."""
    return recursive(
        ["accs", "specs", "c", "vkey", "ref", "units"],
        Ite(
            EqualsInteger(V("c"), Integer(0)),
            check(
                EqualsData(V("vkey"), nth(fields(HeadList(V("specs"))), 2)),
                "one key per claim",
                MkCons(
                    ListData(MkCons(V("ref"), MkCons(V("units"), UnListData(HeadList(V("accs")))))),
                    TailList(V("accs")),
                ),
            ),
            MkCons(
                HeadList(V("accs")),
                call(
                    V("self"),
                    TailList(V("accs")),
                    TailList(V("specs")),
                    SubtractInteger(V("c"), Integer(1)),
                    V("vkey"),
                    V("ref"),
                    V("units"),
                ),
            ),
        ),
    )


def add_to_payee() -> AST:
    r"""\self accs p provider due -> the accumulators of payouts 1.. ([address, I sum] each)
    with the escrow's due added to payout p's, which must be paid to its provider's address."""
    acc = UnListData(HeadList(V("accs")))
    return recursive(
        ["accs", "p", "provider", "due"],
        Ite(
            EqualsInteger(V("p"), Integer(0)),
            let(
                [("acc", acc)],
                check(
                    EqualsData(HeadList(V("acc")), V("provider")),
                    "one provider per payout",
                    MkCons(
                        ListData(
                            MkCons(
                                HeadList(V("acc")),
                                MkCons(
                                    IData(AddInteger(UnIData(nth(V("acc"), 1)), V("due"))),
                                    tail(V("acc"), 2),
                                ),
                            )
                        ),
                        TailList(V("accs")),
                    ),
                ),
            ),
            MkCons(
                HeadList(V("accs")),
                call(
                    V("self"),
                    TailList(V("accs")),
                    SubtractInteger(V("p"), Integer(1)),
                    V("provider"),
                    V("due"),
                ),
            ),
        ),
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


def check_claims() -> AST:
    r"""\self specs accs -> () once each claim 1.. covers an escrow and is signed by its key."""
    spec = fields(HeadList(V("specs")))
    return recursive(
        ["specs", "accs"],
        Ite(
            NullList(V("specs")),
            Unit(),
            let(
                [("claims", UnListData(HeadList(V("accs"))))],
                check(
                    Apply(V("signed"), spec, V("claims")),
                    "claim signature",
                    call(V("self"), TailList(V("specs")), TailList(V("accs"))),
                ),
            ),
        ),
    )


def signed() -> AST:
    r"""\spec_f claims -> whether a claim (fields [note, signature, vkey]) covers an escrow and
    is signed by its key."""
    return PLambda(
        ["spec_f", "claims"],
        eager_and(
            not_null(V("claims")),
            VerifyEd25519Signature(
                UnBData(nth(V("spec_f"), 2)),
                claim_message(HeadList(V("spec_f")), V("claims")),
                UnBData(nth(V("spec_f"), 1)),
            ),
        ),
    )


def check_payouts() -> AST:
    r"""\self outputs accs -> () once each payout 1.. holds its sum, with no datum."""
    return recursive(
        ["outs", "accs"],
        Ite(
            NullList(V("accs")),
            Unit(),
            check(
                holds(
                    fields(HeadList(V("outs"))), UnIData(nth(UnListData(HeadList(V("accs"))), 1))
                ),
                "provider payout",
                call(V("self"), TailList(V("outs")), TailList(V("accs"))),
            ),
        ),
    )


def holds(out: AST, total: AST) -> AST:
    """A provider output (its address checked escrow by escrow) holds the sum, no datum."""
    return eager_and(
        LessThanEqualsInteger(total, lovelace(nth(out, 1))),
        EqualsData(nth(out, 2), NO_DATUM),
    )


def address_of(output: AST) -> AST:
    """The address of a ledger TxOut: what a settle's provider output is paid to."""
    return HeadList(fields(output))


def payees(key: Callable[[AST], AST] = address_of) -> AST:
    r"""\self outs n -> [key, I 0] (list Data) for each of the first n outputs: the provider
    outputs' accumulators, `key` what each output's escrows (or channels) must name."""
    return recursive(
        ["outs", "n"],
        Ite(
            EqualsInteger(V("n"), Integer(0)),
            EMPTY,
            MkCons(
                ListData(MkCons(key(HeadList(V("outs"))), MkCons(IData(Integer(0)), EMPTY))),
                call(V("self"), TailList(V("outs")), SubtractInteger(V("n"), Integer(1))),
            ),
        ),
    )


def repeat() -> AST:
    r"""\self xs item -> one `item` per element of xs."""
    return recursive(
        ["xs", "item"],
        Ite(
            NullList(V("xs")),
            EMPTY,
            MkCons(V("item"), call(V("self"), TailList(V("xs")), V("item"))),
        ),
    )


def first_script() -> AST:
    r"""\self inputs -> the payment credential of the first script input."""
    credential = HeadList(fields(HeadList(fields(nth(fields(HeadList(V("inputs"))), 1)))))
    return recursive(
        ["inputs"],
        check(
            not_null(V("inputs")),
            "no script input",
            let(
                [("credential", credential)],
                Ite(
                    EqualsInteger(tag(V("credential")), Integer(1)),
                    V("credential"),
                    call(V("self"), TailList(V("inputs"))),
                ),
            ),
        ),
    )


WALK_STATE = [
    "inputs", "items", "reds", "receipts", "claims0", "accs", "sum0", "paccs", "consumer",
    "total", "refunds",
]  # fmt: skip


def walk() -> AST:
    r"""\self inputs items reds receipts claims0 accs sum0 paccs consumer total refunds -> ():
    every escrow input checked, signed (by a claim or its own receipt), its due added to its
    provider's payout, its refund to its consumer's run."""
    return script_inputs(WALK_STATE, "one escrow script", _escrow(), _finish())


def script_inputs(state: list[str], trace: str, each: AST, finish: AST) -> AST:
    r"""\self inputs ... -> a batch's walk over the inputs (`state` names its arguments,
    `inputs` first): `each` for an input of the batch's script, with in_f and out_f (the
    input's and its output's fields) bound; a key input is skipped; any other script's refused
    with `trace`; `finish` after the last."""
    return recursive(
        state,
        Ite(
            NullList(V("inputs")),
            finish,
            let(
                [
                    ("in_f", fields(HeadList(V("inputs")))),
                    ("out_f", fields(nth(V("in_f"), 1))),
                    ("credential", HeadList(fields(HeadList(V("out_f"))))),
                ],
                Ite(
                    EqualsData(V("credential"), V("script")),
                    each,
                    check(
                        EqualsInteger(tag(V("credential")), Integer(0)),
                        trace,
                        call(V("self"), TailList(V("inputs")), *[V(name) for name in state[1:]]),
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
            ("signer", UnIData(HeadList(V("items1")))),
            ("items2", TailList(V("items1"))),
            ("payee", UnIData(HeadList(V("items2")))),
            ("vkey", nth(V("d"), 2)),
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
                _signed_by_provider(),
            ),
        ),
    )


def _signed_by_provider() -> AST:
    """The escrow's units signed: by claim 0 (the batch's largest), another claim, or its own
    receipt (signer -1: the next of `receipts`, checked here)."""
    receipt = fields(HeadList(V("receipts")))
    one = MkCons(V("ref"), MkCons(V("units_d"), EMPTY))
    return Ite(
        EqualsInteger(V("signer"), Integer(0)),
        check(
            EqualsData(V("vkey"), V("vkey0")),
            "one key per claim",
            _paid_to_provider(
                V("receipts"), MkCons(V("ref"), MkCons(V("units_d"), V("claims0"))), V("accs")
            ),
        ),
        Ite(
            LessThanInteger(V("signer"), Integer(0)),
            let(
                [("receipt_f", receipt)],
                check(
                    VerifyEd25519Signature(
                        UnBData(V("vkey")),
                        claim_message(HeadList(V("receipt_f")), one),
                        UnBData(nth(V("receipt_f"), 1)),
                    ),
                    "receipt signature",
                    _paid_to_provider(TailList(V("receipts")), V("claims0"), V("accs")),
                ),
            ),
            _paid_to_provider(
                V("receipts"),
                V("claims0"),
                call(
                    V("add_to_claim"),
                    V("accs"),
                    V("claim_specs"),
                    SubtractInteger(V("signer"), Integer(1)),
                    V("vkey"),
                    V("ref"),
                    V("units_d"),
                ),
            ),
        ),
    )


def _paid_to_provider(receipts: AST, claims0: AST, accs: AST) -> AST:
    """The escrow's due added to its payout (payee 0, the batch's largest, another, or none
    when it earns nothing), then the next step."""
    provider = nth(V("d"), 1)
    return let(
        [("receipts_", receipts), ("claims0_", claims0), ("accs_", accs)],
        Ite(
            EqualsInteger(V("payee"), Integer(0)),
            check(
                EqualsData(provider, V("addr0")),
                "one provider per payout",
                _next(AddInteger(V("sum0"), V("due")), V("paccs")),
            ),
            Ite(
                LessThanInteger(V("payee"), Integer(0)),
                check(
                    EqualsInteger(V("due"), Integer(0)),
                    "provider payout",
                    _next(V("sum0"), V("paccs")),
                ),
                _next(
                    V("sum0"),
                    call(
                        V("add_to_payee"),
                        V("paccs"),
                        SubtractInteger(V("payee"), Integer(1)),
                        provider,
                        V("due"),
                    ),
                ),
            ),
        ),
    )


def _next(sum0: AST, paccs: AST) -> AST:
    """The walk's next step: the escrow's refund joins its consumer's run, or starts one."""
    rest = [
        TailList(V("inputs")), TailList(V("items2")), TailList(V("reds")), V("receipts_"),
        V("claims0_"), V("accs_"), sum0, paccs,
    ]  # fmt: skip
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
    """After the last input: the last run refunded, every item, receipt and redeemer used,
    the claims signed, the payouts paid."""
    return let(
        [("_r", Apply(V("refund_run"), V("refunds"), V("consumer"), V("total")))],
        check(
            eager_and(NullList(V("items")), NullList(V("receipts")), NullList(TailList(V("reds")))),
            "one item per escrow input, one receipt per escrow signed alone, and no script "
            "but escrows and this withdrawal",
            check(
                Ite(
                    NullList(V("specs")),
                    NullList(V("claims0")),
                    Apply(V("signed"), fields(HeadList(V("specs"))), V("claims0")),
                ),
                "claim signature",
                let(
                    [("_c", call(V("check_claims"), V("claim_specs"), V("accs")))],
                    Ite(
                        LessThanInteger(Integer(0), V("first_refund")),
                        check(
                            holds(fields(HeadList(V("outputs"))), V("sum0")),
                            "provider payout",
                            call(V("check_payouts"), TailList(V("outputs")), V("paccs")),
                        ),
                        Unit(),
                    ),
                ),
            ),
        ),
    )


def program() -> AST:
    """The settle script's term, before its network_id parameter is applied."""
    return withdrawal(
        [("network", UnIData(V("network_d")))],
        [("settle_hash", UnBData(HeadList(fields(HeadList(fields(V("purpose")))))))],
        _body(),
    )


def withdrawal(before: list[tuple[str, AST]], beside: list[tuple[str, AST]], body: AST) -> AST:
    r"""\network_d ctx -> `body`, once the script runs as a withdrawal, the transaction's only
    one, with a finite validity upper bound: a batch's opening. `body` sees ctx_f, purpose, tx
    and upper (its Extended bound), and the bindings `before` and `beside` (made before the
    purpose is read, and beside tx)."""
    tx = fields(HeadList(V("ctx_f")))
    upper = HeadList(fields(nth(fields(nth(V("tx"), 7)), 1)))  # Interval's upper: Extended
    return PLambda(
        ["network_d", "ctx"],
        let(
            [*before, ("ctx_f", fields(V("ctx"))), ("purpose", nth(V("ctx_f"), 2))],
            check(
                EqualsInteger(tag(V("purpose")), Integer(2)),
                "purpose",
                let(
                    [*beside, ("tx", tx), ("upper", upper)],
                    check(
                        eager_and(
                            NullList(TailList(UnMapData(nth(V("tx"), 6)))),
                            EqualsInteger(tag(V("upper")), Integer(1)),
                        ),
                        "one withdrawal, and an upper bound",
                        body,
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
            ("first_refund", UnIData(nth(V("redeemer_f"), 3))),
            ("outputs", UnListData(nth(V("tx"), 2))),
            ("inputs", UnListData(HeadList(V("tx")))),
            ("refund_run", refund_run()),
            ("add_to_claim", add_to_claim()),
            ("add_to_payee", add_to_payee()),
            ("signed", signed()),
            ("check_claims", check_claims()),
            ("check_payouts", check_payouts()),
            # claim 0's key (none without claims: then no escrow may name claim 0)
            (
                "vkey0",
                Ite(NullList(V("specs")), NOBODY, nth(fields(HeadList(V("specs"))), 2)),
            ),
            ("claim_specs", Ite(NullList(V("specs")), EMPTY, TailList(V("specs")))),
            # payout 0's address (none without provider outputs)
            (
                "addr0",
                Ite(
                    LessThanInteger(Integer(0), V("first_refund")),
                    HeadList(fields(HeadList(V("outputs")))),
                    NOBODY,
                ),
            ),
        ],
        check(
            not_null(V("items")),
            "empty batch",
            let(
                [("script", call(first_script(), V("inputs"))), ("walk", walk())],
                call(
                    V("walk"),
                    V("inputs"),
                    V("items"),
                    UnMapData(nth(V("tx"), 9)),
                    UnListData(nth(V("redeemer_f"), 2)),
                    EMPTY,
                    call(repeat(), V("claim_specs"), ListData(EMPTY)),
                    Integer(0),
                    Ite(
                        LessThanInteger(Integer(0), V("first_refund")),
                        call(
                            payees(),
                            TailList(V("outputs")),
                            SubtractInteger(V("first_refund"), Integer(1)),
                        ),
                        EMPTY,
                    ),
                    NOBODY,
                    Integer(0),
                    tail_n(V("outputs"), V("first_refund")),
                ),
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
    return compile_term(program())


def compile_term(term: AST) -> U.Program:
    """A hand-written program compiled as the deployed scripts are: pluthon's -O3, traces
    kept, forced builtins hoisted."""
    from pluthon import Program, compile
    from pluthon.compiler_config import OPT_O3_CONFIG

    config = OPT_O3_CONFIG.update(remove_trace=False, constant_folding_keep_traces=True)
    compiled = compile(Program((1, 1, 0), term), config)
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
