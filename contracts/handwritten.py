"""Hand-written UPLC validators, used by the demo and tests until the OpShin contracts exist."""

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
