"""Phase 2 with `uplc`: budgets, failures with traces, V3's unit rule, the process-pool
runner with its cache, and the Ogmios answers for evaluateTransaction and submitTransaction."""

from __future__ import annotations

import dataclasses

import cbor2
import pytest
from cbor2 import CBORTag
from uplc.ast import (
    BuiltinList,
    PlutusByteString,
    PlutusConstr,
    PlutusInteger,
    PlutusList,
    PlutusMap,
)

from devnet.errors import LedgerError
from devnet.params import ProtocolParameters
from devnet.phase2 import (
    ScriptJob,
    ScriptOutcome,
    ScriptRunner,
    evaluation_result,
    plutus_data,
    require_success,
    run_job,
)
from devnet.script_context import Constr, encode_data
from tests.devnet.handwritten import REDEEMER_IS_42, compile_uplc
from tests.devnet.plutus_helpers import ALWAYS_SUCCEEDS, FAILS_WITH_TRACE, RETURNS_INTEGER
from tests.ogmios_schema import validate, validate_error

COST_MODELS = ProtocolParameters().cost_models
MAX_MEMORY, MAX_CPU = 14_000_000, 10_000_000_000


def job(
    source: str, redeemer: int = 42, memory: int = MAX_MEMORY, cpu: int = MAX_CPU, index: int = 0
) -> ScriptJob:
    """A spend job whose context is Constr 0 [0, redeemer, 0]: enough for these validators."""
    context = encode_data(Constr(0, (0, redeemer, 0)))
    return ScriptJob("spend", index, 3, bytes(compile_uplc(source)), b"\x81" + context, memory, cpu)


def test_passing_script_reports_its_budget():
    outcome = run_job(job(REDEEMER_IS_42), COST_MODELS)
    # as uplc's CEK machine counts it with the mainnet V3 cost model
    assert outcome == ScriptOutcome("spend", 0, 3_662, 1_024_619, (), None)


def test_failing_script_reports_error_and_traces():
    outcome = run_job(job(REDEEMER_IS_42, redeemer=7), COST_MODELS)
    assert outcome.traces == ("the redeemer must be 42",)
    assert outcome.error is not None and "failed" in outcome.error
    outcome = run_job(job(FAILS_WITH_TRACE), COST_MODELS)
    assert outcome.traces == ("no way",)


def test_v3_must_return_unit():
    assert run_job(job(ALWAYS_SUCCEEDS), COST_MODELS).error is None
    outcome = run_job(job(RETURNS_INTEGER), COST_MODELS)
    assert outcome.error == "a Plutus V3 script must return unit, this one returned (con integer 1)"


def test_budget_exhaustion_is_a_failure():
    enough = run_job(job(REDEEMER_IS_42), COST_MODELS)
    for memory, cpu in [(enough.memory - 1, MAX_CPU), (MAX_MEMORY, enough.cpu - 1)]:
        outcome = run_job(job(REDEEMER_IS_42, memory=memory, cpu=cpu), COST_MODELS)
        assert outcome.error is not None and "ran out of its budget" in outcome.error
    exact = run_job(job(REDEEMER_IS_42, memory=enough.memory, cpu=enough.cpu), COST_MODELS)
    assert exact.error is None


def test_costs_follow_the_ledgers_cost_model_array():
    """Each Ogmios array entry maps onto uplc's parameter of the same position."""
    costly = dict(COST_MODELS)
    costly["plutus:v3"] = [value * 2 for value in COST_MODELS["plutus:v3"]]
    base = run_job(job(REDEEMER_IS_42), COST_MODELS)
    doubled = run_job(job(REDEEMER_IS_42), costly)
    assert (doubled.memory, doubled.cpu) == (2 * base.memory, 2 * base.cpu)


def test_malformed_script_or_arguments_fail_the_script():
    broken = dataclasses.replace(job(ALWAYS_SUCCEEDS), script=b"\x43\x01\x02\x03")
    assert run_job(broken, COST_MODELS).error.startswith("cannot decode")
    not_data = dataclasses.replace(job(ALWAYS_SUCCEEDS), arguments=cbor2.dumps([True]))
    assert run_job(not_data, COST_MODELS).error.startswith("cannot decode")


def test_plutus_data_from_cbor_accepts_immutable_map_keys():
    decoded = cbor2.loads(cbor2.dumps({(1, 2): CBORTag(1280, [5])}))
    assert plutus_data(decoded) == PlutusMap(
        {PlutusList([PlutusInteger(1), PlutusInteger(2)]): PlutusConstr(7, [PlutusInteger(5)])}
    )
    assert plutus_data(CBORTag(102, [300, []])) == PlutusConstr(300, [])


# --- the runner -----------------------------------------------------------------------


@pytest.mark.slow  # starts a pool of worker processes: seconds
async def test_runner_runs_jobs_in_worker_processes_and_caches_outcomes():
    runner = ScriptRunner(COST_MODELS, workers=2)
    try:
        jobs = [job(REDEEMER_IS_42, index=0), job(REDEEMER_IS_42, redeemer=7, index=1)]
        first = await runner.run(jobs)
        assert [o.error is None for o in first] == [True, False]
        assert first == [run_job(j, COST_MODELS) for j in jobs]
    finally:
        runner.close()
    # same script, arguments and budget under another pointer: answered from the cache,
    # which still works once the pool is gone; anything new needs the pool
    again = await runner.run([dataclasses.replace(jobs[0], index=5)])
    assert again == [dataclasses.replace(first[0], index=5)]
    with pytest.raises(RuntimeError):
        await runner.run([job(REDEEMER_IS_42, memory=MAX_MEMORY - 1)])


# --- Ogmios answers -------------------------------------------------------------------


def outcome(error: str | None = None, traces: tuple[str, ...] = ()) -> ScriptOutcome:
    return ScriptOutcome("mint", 1, 3_662, 1_024_619, traces, error)


def test_evaluation_result_lists_budgets():
    result = evaluation_result([outcome()])
    assert result == [
        {
            "validator": {"purpose": "mint", "index": 1},
            "budget": {"memory": 3_662, "cpu": 1_024_619},
        }
    ]
    validate(
        "evaluateTransaction",
        {"jsonrpc": "2.0", "method": "evaluateTransaction", "result": result, "id": None},
    )


def test_evaluation_failure_carries_validation_error_and_traces():
    with pytest.raises(LedgerError) as caught:
        evaluation_result([outcome(), outcome("the script failed: boom", ("a", "b"))])
    error = caught.value
    validate_error("evaluateTransaction", error.to_json())
    assert error.code == 3010
    [failure] = error.data
    assert failure["validator"] == {"purpose": "mint", "index": 1}
    assert failure["error"]["code"] == 3012
    assert failure["error"]["data"] == {
        "validationError": "the script failed: boom",
        "traces": ["a", "b"],
    }


def test_submit_failure_is_a_validation_tag_mismatch_with_traces_in_the_reason():
    require_success([outcome()])
    with pytest.raises(LedgerError) as caught:
        require_success([outcome("the script failed: boom", ("first", "second"))])
    error = caught.value
    validate_error("submitTransaction", error.to_json())
    assert error.code == 3136
    assert error.data["declaredSpending"] == "inputs"
    assert "first | second" in error.data["mismatchReason"]
    assert "first | second" in error.message


SERIALISES_LIKE_THE_LEDGER = """
(program 1.1.0 (lam ctx
  [ (lam expect
      (force [ [ [ (force (builtin ifThenElse))
                   [ [ (builtin equalsByteString)
                       [ (builtin serialiseData)
                         (con data (List [B #%s, I 18446744073709551615, List [I 1]])) ] ]
                     expect ] ]
                 (delay (con unit ())) ]
               (delay (force [ [ (force (builtin trace)) (con string "not the ledger's bytes") ]
                               (delay (error)) ])) ]))
    (con bytestring #%s) ]))
"""


def test_serialise_data_writes_the_ledgers_bytes():
    """64-byte bytestrings stay whole, lists are indefinite, 2**64 - 1 is no bignum: as on
    mainnet (uplc's own serialiser differs in all three)."""
    sixty_four = b"a" * 64
    expected = encode_data([sixty_four, 2**64 - 1, [1]])
    assert expected == b"\x9f\x58\x40" + sixty_four + b"\x1b" + b"\xff" * 8 + b"\x9f\x01\xff\xff"
    source = SERIALISES_LIKE_THE_LEDGER % (sixty_four.hex(), expected.hex())
    outcome = run_job(job(source), COST_MODELS)
    assert outcome.error is None, outcome.traces


def test_a_data_values_size_is_measured_once_and_as_uplc_walks_it():
    """Costing measures builtin arguments; the devnet remembers each compound value's size
    (uplc's values are frozen). The sizes must be uplc's own walk, shared parts included."""

    def walk(value) -> int:  # uplc's definition: 4 per node over its children, atoms as they are
        if isinstance(value, PlutusConstr | PlutusList):
            items = value.fields if isinstance(value, PlutusConstr) else value.value
            return 4 + sum(walk(item) for item in items)
        if isinstance(value, PlutusMap):
            return 4 + sum(walk(k) + walk(v) for k, v in value.value.items())
        return value.ex_mem()

    shared = PlutusList([PlutusInteger(2**70), PlutusByteString(b"x" * 100)])
    value = PlutusConstr(3, [shared, PlutusMap({PlutusInteger(1): shared}), shared])
    assert value.ex_mem() == walk(value) == value.ex_mem()
    assert shared.ex_mem() == walk(shared)
    listed = BuiltinList([value, PlutusConstr(0, [])])
    assert listed.ex_mem() == walk(value) + 4 == listed.ex_mem()
