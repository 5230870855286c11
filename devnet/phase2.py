"""Phase-2 validation: run Plutus scripts with `uplc`, in worker processes.

A max-budget script takes seconds in the Python CEK machine, so evaluation never runs on the
event loop: `ScriptRunner` hands jobs to a process pool and caches outcomes by script,
arguments and budget. `run_job` is pure, so its outcome is the same in any process.
"""

from __future__ import annotations

import asyncio
import collections
import ctypes
import dataclasses
import functools
import hashlib
import multiprocessing
import multiprocessing.forkserver
import multiprocessing.resource_tracker
import os
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import cbor2
from uplc.ast import (
    BuiltinByteString,
    BuiltInFun,
    BuiltInFunEvalMap,
    BuiltinList,
    BuiltinUnit,
    PlutusByteString,
    PlutusConstr,
    PlutusData,
    PlutusInteger,
    PlutusList,
    PlutusMap,
    Program,
    typechecked,
)
from uplc.cost_model import (
    Budget,
    BuiltinCostModel,
    CekMachineCostModel,
    PlutusVersion,
    default_builtin_cost_model_base,
    default_cek_machine_cost_model_base,
    latest_network_config_plutus,
    updated_builtin_cost_model_from_network_config,
    updated_cek_machine_cost_model_from_network_config,
)
from uplc.machine import Machine
from uplc.tools import apply, unflatten

from devnet.errors import LedgerError
from devnet.script_context import Constr, Data, DataMap, encode_data

# uplc decodes and walks programs recursively: real validators (OpShin's, a few KB) nest far
# deeper than Python's default limit. Python 3.11 keeps such recursion off the C stack. This
# module is imported by the node and preloaded by every evaluation worker, so both get it.
DEEP_SCRIPT_RECURSION_LIMIT = 50_000
sys.setrecursionlimit(max(sys.getrecursionlimit(), DEEP_SCRIPT_RECURSION_LIMIT))


def _as_data(value: PlutusData) -> Data:
    """uplc's Data as our Data, for the ledger's own CBOR encoding."""
    if isinstance(value, PlutusInteger | PlutusByteString):
        return value.value
    if isinstance(value, PlutusList):
        return [_as_data(item) for item in value.value]
    if isinstance(value, PlutusMap):
        return DataMap(tuple((_as_data(k), _as_data(v)) for k, v in value.value.items()))
    if isinstance(value, PlutusConstr):
        return Constr(value.constructor, tuple(_as_data(f) for f in value.fields))
    raise TypeError(f"not Plutus Data: {value!r}")


def _ledger_serialise_data(value: PlutusData) -> BuiltinByteString:
    return BuiltinByteString(encode_data(_as_data(value)))


# uplc's serialiseData differs from the ledger's for 64-byte bytestrings (chunked), non-empty
# lists (definite length) and 2**64 - 1 (bignum). Scripts that sign or hash Data must see the
# ledger's bytes, so the builtin is replaced (same cost: costing looks only at the argument).
BuiltInFunEvalMap[BuiltInFun.SerialiseData] = typechecked(PlutusData)(_ledger_serialise_data)


def _remembered(size: Callable[[Any], int]) -> Callable[[Any], int]:
    """`size` computed once per value: uplc's values are frozen, so it cannot change."""

    def remembered(value: Any) -> int:
        known = value.__dict__.get("_unchained_size")
        if known is None:
            known = size(value)
            object.__setattr__(value, "_unchained_size", known)
        return known

    return remembered


# Costing a builtin call measures its arguments, and uplc walks a Data or list argument whole
# every time: a script reading a 41-escrow settle's context spent half its run re-measuring it.
# The same numbers, each compound value measured once (what the costs mean is unchanged).
for _compound in (PlutusList, PlutusMap, PlutusConstr):
    _compound.d_ex_mem = _remembered(_compound.d_ex_mem)  # type: ignore[method-assign]
BuiltinList.ex_mem = _remembered(BuiltinList.ex_mem)  # type: ignore[method-assign]

SCRIPT_EXECUTION_FAILURE = 3010
VALIDATION_FAILURE = 3012
SPENDS_MISMATCH = 3136


@dataclasses.dataclass(frozen=True)
class ScriptJob:
    """One script run the transaction asks for: one per redeemer."""

    purpose: str  # Ogmios purpose name: spend, mint, publish, withdraw, vote, propose
    index: int
    language: int  # 1, 2 or 3 for Plutus V1, V2, V3
    script: bytes  # as in PlutusV3Script: the flat program wrapped in one CBOR bytestring
    arguments: bytes  # CBOR list of Data arguments (V3: [context]; V1/V2: [datum?, redeemer, ctx])
    memory: int
    cpu: int


@dataclasses.dataclass(frozen=True)
class ScriptOutcome:
    purpose: str
    index: int
    memory: int  # what the script used (past the budget when it ran out)
    cpu: int
    traces: tuple[str, ...]
    error: str | None  # None when the script succeeded

    @property
    def validator(self) -> dict[str, Any]:
        """The Ogmios RedeemerPointer."""
        return {"purpose": self.purpose, "index": self.index}


def run_job(job: ScriptJob, cost_models: Mapping[str, Sequence[int]]) -> ScriptOutcome:
    """Evaluate one script within its budget: V3 must return unit, V1/V2 must not fail."""
    try:
        program = _program(job.script)
        arguments = [plutus_data(item) for item in cbor2.loads(job.arguments)]
    except Exception as exc:  # a malformed script or argument is the script's failure
        return ScriptOutcome(job.purpose, job.index, 0, 0, (), f"cannot decode: {exc}")
    cek, builtins = _machine_costs(job.language, tuple(cost_models[f"plutus:v{job.language}"]))
    machine = Machine(Budget(cpu=job.cpu, memory=job.memory), cek, builtins)
    computation = machine.eval(apply(program, *arguments))
    used = computation.cost
    error = _failure(job, computation.result, used)
    return ScriptOutcome(
        job.purpose, job.index, used.memory, used.cpu, tuple(computation.logs), error
    )


def _failure(job: ScriptJob, result: Any, used: Budget) -> str | None:
    if used.memory > job.memory or used.cpu > job.cpu:
        return (
            f"the script ran out of its budget of {job.memory} memory / {job.cpu} cpu "
            f"(used at least {used.memory} memory / {used.cpu} cpu)"
        )
    if isinstance(result, Exception):
        return f"the script failed: {result}"
    if job.language >= 3 and not isinstance(result, BuiltinUnit):
        return f"a Plutus V3 script must return unit, this one returned {result.dumps()}"
    return None


@functools.lru_cache(maxsize=128)
def _program(script: bytes) -> Program:
    """Decode a script once per process; evaluation does not modify the decoded program."""
    return unflatten(script)


@functools.lru_cache(maxsize=8)
def _machine_costs(
    language: int, parameters: tuple[int, ...]
) -> tuple[CekMachineCostModel, BuiltinCostModel]:
    """uplc's cost models from an Ogmios cost-model array (parameters in uplc's name order)."""
    names = latest_network_config_plutus(PlutusVersion(f"PlutusV{language}")).keys()
    named = dict(zip(names, parameters, strict=False))
    return (
        updated_cek_machine_cost_model_from_network_config(
            default_cek_machine_cost_model_base(), named
        ),
        updated_builtin_cost_model_from_network_config(default_builtin_cost_model_base(), named),
    )


def plutus_data(value: Any) -> PlutusData:
    """Decoded CBOR -> uplc Data (cbor2 hands map keys over as tuples, so accept those too)."""
    if isinstance(value, cbor2.CBORTag):
        return _constr(value)
    if isinstance(value, bool):
        raise ValueError("a CBOR boolean is not Plutus Data")
    if isinstance(value, int):
        return PlutusInteger(value)
    if isinstance(value, bytes):
        return PlutusByteString(value)
    if isinstance(value, list | tuple):
        return PlutusList([plutus_data(item) for item in value])
    if isinstance(value, Mapping):
        return PlutusMap({plutus_data(k): plutus_data(v) for k, v in value.items()})
    raise ValueError(f"not Plutus Data: {value!r}")


def _constr(tag: cbor2.CBORTag) -> PlutusConstr:
    if 121 <= tag.tag <= 127:
        index, fields = tag.tag - 121, tag.value
    elif 1280 <= tag.tag <= 1400:
        index, fields = tag.tag - 1280 + 7, tag.value
    elif tag.tag == 102:
        index, fields = tag.value
    else:
        raise ValueError(f"CBOR tag {tag.tag} is not Plutus Data")
    return PlutusConstr(index, [plutus_data(field) for field in fields])


class ScriptRunner:
    """Runs script jobs in worker processes and remembers recent outcomes.

    Outcomes are cached by (script hash, arguments hash, budget): the cost models are fixed
    for a runner, so make a new runner when they change. Workers come from a forkserver, so
    the program's main module must be safe to import (guard it with `__name__ == "__main__"`),
    and the first runner must be made on a thread that outlives it (the main thread): the
    forkserver ends when the thread that started it does (see `_end_with_parent`).
    """

    def __init__(
        self,
        cost_models: Mapping[str, Sequence[int]],
        workers: int | None = None,
        cache_size: int = 1024,
    ) -> None:
        self._cost_models = {language: list(array) for language, array in cost_models.items()}
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload([__name__])
        self._pool = ProcessPoolExecutor(
            max_workers=workers, mp_context=context, initializer=_leave_interrupts_to_parent
        )
        # start the forkserver and a worker now: the first evaluation would wait ~1.5 s for it
        self._pool.submit(_warm_up, self._cost_models)
        self._cache: collections.OrderedDict[tuple[Any, ...], ScriptOutcome] = (
            collections.OrderedDict()
        )
        self._cache_size = cache_size

    async def run(self, jobs: Sequence[ScriptJob]) -> list[ScriptOutcome]:
        """Outcomes in job order; the jobs run in parallel in the pool."""
        return list(await asyncio.gather(*(self._run_one(job) for job in jobs)))

    async def _run_one(self, job: ScriptJob) -> ScriptOutcome:
        key = _cache_key(job)
        outcome = self._cache.get(key)
        if outcome is None:
            loop = asyncio.get_running_loop()
            outcome = await loop.run_in_executor(self._pool, run_job, job, self._cost_models)
            self._remember(key, outcome)
        else:
            self._cache.move_to_end(key)
        return dataclasses.replace(outcome, purpose=job.purpose, index=job.index)

    def _remember(self, key: tuple[Any, ...], outcome: ScriptOutcome) -> None:
        self._cache[key] = outcome
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)

    def close(self) -> None:
        """Stop the workers (queued jobs are dropped, running ones finish) and wait for them."""
        self._pool.shutdown(wait=True, cancel_futures=True)


def _leave_interrupts_to_parent() -> None:
    """Ctrl-C reaches the whole process group: the parent shuts the pool down in order."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _end_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent dies. Without it a devnet killed with
    SIGKILL leaves its forkserver, workers and resource tracker behind as orphans (seen after
    every test run that kills one); elsewhere this does nothing."""
    if not sys.platform.startswith("linux"):
        return
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _in_forkserver() -> bool:
    """Whether this module is being preloaded by a forkserver (it imports it by name)."""
    return any("multiprocessing.forkserver import main" in arg for arg in sys.orig_argv)


def stop_helper_processes() -> None:
    """Stop this process's forkserver and resource tracker, once every pool is closed.

    Both would outlive an abrupt exit (a worker holds the tracker's pipe open), so a clean
    shutdown stops them and reaps them. multiprocessing has only these private stoppers;
    they start again on demand.
    """
    multiprocessing.forkserver._forkserver._stop()
    multiprocessing.resource_tracker._resource_tracker._stop()


def _warm_up(cost_models: Mapping[str, Sequence[int]]) -> None:
    for language in (1, 2, 3):
        if f"plutus:v{language}" in cost_models:
            _machine_costs(language, tuple(cost_models[f"plutus:v{language}"]))


def _cache_key(job: ScriptJob) -> tuple[Any, ...]:
    return (
        job.language,
        hashlib.blake2b(job.script, digest_size=28).digest(),
        hashlib.blake2b(job.arguments, digest_size=32).digest(),
        job.memory,
        job.cpu,
    )


# --- Ogmios answers ------------------------------------------------------------------------


def evaluation_result(outcomes: Sequence[ScriptOutcome]) -> list[dict[str, Any]]:
    """The evaluateTransaction result, or LedgerError 3010 naming every failed validator."""
    failures = [outcome for outcome in outcomes if outcome.error is not None]
    if failures:
        raise LedgerError(
            SCRIPT_EXECUTION_FAILURE,
            "Some scripts of the transaction terminated with error(s).",
            [{"validator": o.validator, "error": _validation_failure(o)} for o in failures],
        )
    return [
        {"validator": o.validator, "budget": {"memory": o.memory, "cpu": o.cpu}} for o in outcomes
    ]


def _validation_failure(outcome: ScriptOutcome) -> dict[str, Any]:
    return {
        "code": VALIDATION_FAILURE,
        "message": f"{outcome.purpose}#{outcome.index}: {outcome.error}",
        "data": {"validationError": outcome.error, "traces": list(outcome.traces)},
    }


def require_success(outcomes: Sequence[ScriptOutcome]) -> None:
    """For submitTransaction: a transaction declared valid whose script fails is refused (3136).

    The schema allows only `declaredSpending` and `mismatchReason` in the data, so the traces
    go into the reason text.
    """
    failures = [outcome for outcome in outcomes if outcome.error is not None]
    if not failures:
        return
    reason = "; ".join(_describe(outcome) for outcome in failures)
    raise LedgerError(
        SPENDS_MISMATCH,
        f"The transaction is declared valid but a script failed: {reason}",
        {"declaredSpending": "inputs", "mismatchReason": reason},
    )


def _describe(outcome: ScriptOutcome) -> str:
    traces = " | ".join(outcome.traces) if outcome.traces else "none"
    return f"{outcome.purpose}#{outcome.index}: {outcome.error} (traces: {traces})"


if _in_forkserver():  # the forkserver ends with the devnet, each worker the instant it forks
    _end_with_parent()
    os.register_at_fork(after_in_child=_end_with_parent)
