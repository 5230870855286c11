"""Hand-written UPLC validators for the devnet's script tests and its benchmark: tiny programs
whose every step is in sight, so a failure points at the devnet's evaluator, not a compiler."""

from __future__ import annotations

from pycardano import PlutusV3Script
from uplc import flatten, parse

# A Plutus V3 spending validator: succeeds only when the redeemer (field 1 of the
# ScriptContext) is the integer 42, and traces why otherwise.
REDEEMER_IS_42 = """
(program 1.1.0
  (lam ctx
    [ (lam fields
        (force
          [ [ [ (force (builtin ifThenElse))
                [ [ (builtin equalsInteger)
                    [ (builtin unIData)
                      [ (force (builtin headList)) [ (force (builtin tailList)) fields ] ] ] ]
                  (con integer 42) ] ]
              (delay (con unit ())) ]
            (delay (force [ [ (force (builtin trace)) (con string "the redeemer must be 42") ]
                            (delay (error)) ])) ]))
      [ (force (force (builtin sndPair))) [ (builtin unConstrData) ctx ] ] ]))
"""


def compile_uplc(source: str) -> PlutusV3Script:
    """A Plutus V3 script from UPLC text (CBOR-wrapped flat encoding, as witnesses carry it)."""
    return PlutusV3Script(flatten(parse(source)))


def _field(n: int, fields: str) -> str:
    """UPLC for the n-th element of a builtin list."""
    for _ in range(n):
        fields = f"[ (force (builtin tailList)) {fields} ]"
    return f"[ (force (builtin headList)) {fields} ]"


def _constr_fields(data: str) -> str:
    return f"[ (force (force (builtin sndPair))) [ (builtin unConstrData) {data} ] ]"


# A Plutus V3 spending validator that decodes its inline datum `Constr 0 [owner_pkh, ...]`
# (ScriptInfo's SpendingScript datum) and requires `owner_pkh` among the signatories
# (TxInfo field 8), walking the list with a Z-combinator. A representative small validator
# for benchmarks: it decodes data and checks a signature, like real escrows do.
SIGNED_BY_DATUM_OWNER = f"""
(program 1.1.0
  (lam ctx
    [ (lam owner
        [ (lam signatories
            [ (lam z
                [ (lam find
                    (force [ [ [ (force (builtin ifThenElse)) [ find signatories ] ]
                               (delay (con unit ())) ]
                             (delay (force [ [ (force (builtin trace))
                                               (con string "not signed by the datum's owner") ]
                                             (delay (error)) ])) ]))
                  [ z (lam self (lam sigs
                      (force [ [ [ (force (force (builtin chooseList))) sigs ]
                                 (delay (con bool False)) ]
                               (delay (force [ [ [ (force (builtin ifThenElse))
                                                  [ [ (builtin equalsByteString)
                                                      [ (builtin unBData)
                                                        [ (force (builtin headList)) sigs ] ] ]
                                                    owner ] ]
                                                (delay (con bool True)) ]
                                              (delay [ self [ (force (builtin tailList)) sigs ] ])
                                            ])) ]))) ] ])
              (lam f [ (lam x [ f (lam v [ [ x x ] v ]) ])
                       (lam x [ f (lam v [ [ x x ] v ]) ]) ]) ])
          [ (builtin unListData) {_field(8, _constr_fields(_field(0, _constr_fields("ctx"))))} ] ])
      [ (builtin unBData)
        {
    _field(
        0,
        _constr_fields(
            _field(0, _constr_fields(_field(1, _constr_fields(_field(2, _constr_fields("ctx"))))))
        ),
    )
} ] ]))
"""
