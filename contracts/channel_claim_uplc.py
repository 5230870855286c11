"""The batch channel claim, written by hand in pluthon: the one deployed (PROTOCOL.md).

`contracts/channel_claim.py` (OpShin) is the readable reference of the same checks, in the
same order (so a refused batch fails with the same trace in both), and
tests/contracts/test_channel_scripts.py runs every vector against both. OpShin's calling
convention cost 186K memory per channel there; here, as in `settle_uplc.py` (whose helpers
this reuses), the walk is one recursive function over the inputs whose constants are closed
over: each channel's fields are read once, its checks are `ifThenElse` chains, payout 0
(the builder puts the provider with the most channels first) is accumulated in the walk's own
arguments, and the continuing outputs, payees, signatures and redeemers are tailed off as its
channel passes.

Program: `\\network_id (Data) -> \\context (Data) -> ()`, applied to its Data parameter the
way `contracts.artifacts.apply_parameters` applies OpShin's.
"""

from __future__ import annotations

from pluthon import (
    AddInteger,
    BData,
    Blake2b_224,
    ByteString,
    ConstrData,
    EqualsData,
    EqualsInteger,
    HeadList,
    Integer,
    Ite,
    LessThanEqualsInteger,
    LessThanInteger,
    MapData,
    MkCons,
    NullList,
    SerialiseData,
    SubtractInteger,
    TailList,
    UnBData,
    UnIData,
    UnListData,
    UnMapData,
    UPLCConstant,
    VerifyEd25519Signature,
)
from pluthon.pluthon_ast import AST
from uplc import ast as U

from contracts.settle_uplc import (
    EMPTY,
    NOBODY,
    V,
    add_to_payee,
    call,
    check,
    check_payouts,
    compile_term,
    eager_and,
    fields,
    first_script,
    holds,
    let,
    lovelace,
    not_null,
    nth,
    payees,
    script_inputs,
    tag,
    tail,
    tail_n,
    withdrawal,
)

IOU_DOMAIN = b"UNCHAINED/iou/v1"
TRUE = UPLCConstant(U.BuiltinBool(True))
ONE_EACH = "one payee and signature per channel, and no script but channels and this withdrawal"

WALK_STATE = ["inputs", "conts", "payees", "sigs", "reds", "sum0", "paccs"]


def payee_of(output: AST) -> AST:
    """B blake2b_224(serialise_data(address)) of a ledger TxOut: what a channel's payee is."""
    return BData(Blake2b_224(SerialiseData(HeadList(fields(output)))))


def walk() -> AST:
    r"""\self inputs conts payees sigs reds sum0 paccs -> (): every channel input claimed by
    its IOU, its continuing output checked, its take added to its provider's payout."""
    return script_inputs(WALK_STATE, "one channel script", _channel(), _finish())


def _channel() -> AST:
    """One channel: its continuing output (address, datum with the IOU's amount as claimed,
    value less the take), the IOU's signature, then its payout."""
    return let(
        [
            ("address", HeadList(V("out_f"))),
            ("d", fields(HeadList(fields(nth(V("out_f"), 2))))),  # OutputDatum C2[d]: d's
            ("c_f", fields(HeadList(V("conts")))),
            ("c_datum", nth(V("c_f"), 2)),
            (  # read from an inline datum (OutputDatum C2) only: a hash's fails traced
                "amount_d",
                check(
                    EqualsInteger(tag(V("c_datum")), Integer(2)),
                    "continuing datum",
                    nth(fields(HeadList(fields(V("c_datum")))), 3),
                ),
            ),
            ("d3", tail(V("d"), 3)),
            ("closing_d", nth(V("d3"), 1)),
            ("terms_d", nth(V("d"), 2)),
            ("payee_d", nth(V("d"), 1)),
            ("vkey_d", HeadList(V("d"))),
        ],
        check(
            EqualsData(HeadList(V("c_f")), V("address")),
            "continuing address",
            check(
                EqualsData(V("c_datum"), _claimed_datum()),
                "continuing datum",
                let(
                    [
                        ("claimed", UnIData(HeadList(V("d3")))),
                        ("amount", UnIData(V("amount_d"))),
                    ],
                    check(
                        LessThanInteger(V("claimed"), V("amount")),
                        "stale IOU",
                        _take(),
                    ),
                ),
            ),
        ),
    )


def _claimed_datum() -> AST:
    """The input's OutputDatum with `claimed` replaced by the continuing datum's."""
    datum = MkCons(
        V("vkey_d"),
        MkCons(V("payee_d"), MkCons(V("terms_d"), MkCons(V("amount_d"), MkCons(V("closing_d"),
                                                                               EMPTY)))),
    )  # fmt: skip
    return ConstrData(Integer(2), MkCons(ConstrData(Integer(0), datum), EMPTY))


def _take() -> AST:
    value = nth(V("out_f"), 1)
    c_value = nth(V("c_f"), 1)
    return let(
        [("take", SubtractInteger(V("amount"), V("claimed"))), ("held", lovelace(value))],
        check(
            LessThanEqualsInteger(V("take"), V("held")),
            "claim above the deposit",
            check(
                eager_and(
                    EqualsInteger(lovelace(c_value), SubtractInteger(V("held"), V("take"))),
                    EqualsData(
                        MapData(TailList(UnMapData(c_value))), MapData(TailList(UnMapData(value)))
                    ),
                ),
                "continuing value",
                check(
                    EqualsData(nth(V("c_f"), 3), nth(V("out_f"), 3)),
                    "continuing reference script",
                    _closing(),
                ),
            ),
        ),
    )


def _closing() -> AST:
    """A closing channel claimed by its close, then the IOU's signature and the payout."""
    return let(
        [("closing", UnIData(V("closing_d")))],
        check(
            Ite(
                LessThanInteger(V("closing"), Integer(0)),
                TRUE,
                LessThanEqualsInteger(V("latest"), V("closing")),
            ),
            "claim after close",
            check(
                VerifyEd25519Signature(UnBData(V("vkey_d")), _iou(), UnBData(HeadList(V("sigs")))),
                "iou signature",
                _paid(),
            ),
        ),
    )


def _iou() -> AST:
    """serialise_data(Iou): C0[domain, network_id, channel_hash, channel, amount]."""
    iou = MkCons(
        BData(ByteString(IOU_DOMAIN)),
        MkCons(V("network_d"), MkCons(V("hash_d"), MkCons(V("terms_d"), MkCons(V("amount_d"),
                                                                               EMPTY)))),
    )  # fmt: skip
    return SerialiseData(ConstrData(Integer(0), iou))


def _paid() -> AST:
    """The take added to the channel's payout (0, another, or past the end: none), then the
    next input."""
    rest = [TailList(V("inputs")), TailList(V("conts")), TailList(V("payees")),
            TailList(V("sigs")), TailList(V("reds"))]  # fmt: skip
    return let(
        [("p", UnIData(HeadList(V("payees"))))],
        Ite(
            EqualsInteger(V("p"), Integer(0)),
            check(
                EqualsData(V("payee_d"), V("payee0")),
                "one provider per payout",
                call(V("self"), *rest, AddInteger(V("sum0"), V("take")), V("paccs")),
            ),
            call(
                V("self"),
                *rest,
                V("sum0"),
                call(
                    V("add_to_payee"),
                    V("paccs"),
                    SubtractInteger(V("p"), Integer(1)),
                    V("payee_d"),
                    V("take"),
                ),
            ),
        ),
    )


def _finish() -> AST:
    """After the last input: every payee, signature and redeemer used, the payouts paid."""
    return check(
        eager_and(NullList(V("payees")), NullList(V("sigs")), NullList(TailList(V("reds")))),
        ONE_EACH,
        Ite(
            LessThanInteger(Integer(0), V("first")),
            check(
                holds(fields(HeadList(V("outputs"))), V("sum0")),
                "provider payout",
                call(V("check_payouts"), TailList(V("outputs")), V("paccs")),
            ),
            call(V("check_payouts"), V("outputs"), V("paccs")),
        ),
    )


def program() -> AST:
    """The claim script's term, before its network_id parameter is applied."""
    return withdrawal([], [], _body())


def _body() -> AST:
    return let(
        [
            ("redeemer_f", fields(nth(V("ctx_f"), 1))),
            ("payees0", UnListData(HeadList(V("redeemer_f")))),
        ],
        check(
            not_null(V("payees0")),
            "empty batch",
            let(
                [
                    ("latest", UnIData(HeadList(fields(V("upper"))))),
                    ("first", UnIData(nth(V("redeemer_f"), 2))),
                    ("outputs", UnListData(nth(V("tx"), 2))),
                    ("inputs", UnListData(HeadList(V("tx")))),
                    ("script", call(first_script(), V("inputs"))),
                    ("hash_d", HeadList(fields(V("script")))),
                    ("add_to_payee", add_to_payee()),
                    ("check_payouts", check_payouts()),
                    # payout 0's payee hash (none without provider outputs)
                    (
                        "payee0",
                        Ite(
                            LessThanInteger(Integer(0), V("first")),
                            payee_of(HeadList(V("outputs"))),
                            NOBODY,
                        ),
                    ),
                    ("walk", walk()),
                ],
                call(
                    V("walk"),
                    V("inputs"),
                    tail_n(V("outputs"), V("first")),
                    V("payees0"),
                    UnListData(nth(V("redeemer_f"), 1)),
                    UnMapData(nth(V("tx"), 9)),
                    Integer(0),
                    Ite(
                        LessThanInteger(Integer(0), V("first")),
                        call(
                            payees(payee_of),
                            TailList(V("outputs")),
                            SubtractInteger(V("first"), Integer(1)),
                        ),
                        EMPTY,
                    ),
                ),
            ),
        ),
    )


def build() -> U.Program:
    """The program, compiled as settle_uplc's is."""
    return compile_term(program())
