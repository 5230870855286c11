"""evaluateTransaction's refusals over the socket, each valid under the Ogmios v6 schema.

3002 when `additionalUtxo` restates an output the ledger holds (outputs still in the mempool
are not in the ledger: a chained transaction may pass them), 3004 when no script context can
be built, 3010 with one failure per validator (3011, 3013, 3117 here; 3012 with traces in
test_plutus). A body that is no transaction (-32602) is in test_http. 3000, 3001 and 3003 are
about eras before Conway, which the devnet never is.
"""

from __future__ import annotations

from typing import Any

from pycardano import (
    PaymentSigningKey,
    PlutusData,
    PlutusV1Script,
    RedeemerTag,
    TransactionBody,
    TransactionBuilder,
    TransactionInput,
    TransactionOutput,
)
from uplc import flatten, parse

from devnet.genesis import ADA, wallet_address
from devnet.ogmios_json import output_reference_json, utxo_json
from offchain.chain.ogmios import request
from offchain.chain.submit import submit
from tests.devnet.conftest import forge
from tests.devnet.handwritten import REDEEMER_IS_42, compile_uplc
from tests.devnet.plutus_helpers import out_ref, redeemer, script_address, seal
from tests.devnet.rpc import rpc_raw
from tests.ogmios_schema import validate

SCRIPT = compile_uplc(REDEEMER_IS_42)
V1_SCRIPT = PlutusV1Script(flatten(parse("(program 1.0.0 (lam d (lam r (lam c (con unit ())))))")))
PAYEE = wallet_address(PaymentSigningKey.generate())


def ledger_order(*refs: TransactionInput) -> list[TransactionInput]:
    """Inputs as the ledger orders them, which redeemer pointers count in."""
    return sorted(refs, key=lambda r: (r.transaction_id.payload, r.index))


def spend(locked: TransactionInput, *others: TransactionInput, at: int = 0, **witnesses) -> str:
    """CBOR hex of a transaction whose spend redeemer (data 42) points at input `at`."""
    inputs = ledger_order(locked, *others)
    body = TransactionBody(inputs=inputs, outputs=[TransactionOutput(PAYEE, 2 * ADA)], fee=ADA)
    pointer = redeemer(RedeemerTag.SPEND, at, 42)
    return seal(body, redeemer=[pointer], **witnesses).cbor.hex()


def locked_at(script: Any) -> TransactionOutput:
    return TransactionOutput(script_address(script), 10 * ADA, datum=PlutusData())


async def evaluate(devnet, cbor: str, additional: list | None = None) -> dict:
    params = {"transaction": {"cbor": cbor}, "additionalUtxo": additional}
    response = await rpc_raw(devnet.url, "evaluateTransaction", params)
    validate("evaluateTransaction", response)
    return response


async def lock_in_the_mempool(devnet) -> tuple[TransactionInput, list[dict], str]:
    """A fresh wallet's lock at SCRIPT, submitted and left in the mempool (not in the ledger
    yet): the locked output's reference, that output as `additionalUtxo`, and the CBOR hex
    of a transaction spending it."""
    key = PaymentSigningKey.generate()
    owner = wallet_address(key)
    await request(devnet.url, "devnet/fund", {"address": str(owner), "lovelace": 100 * ADA})
    await forge(devnet)
    builder = TransactionBuilder(devnet.context())
    builder.add_input_address(owner)
    builder.add_output(locked_at(SCRIPT))
    lock = builder.build_and_sign([key], change_address=owner)
    await submit(devnet.url, lock)
    locked = TransactionInput(lock.id, 0)
    additional = [utxo_json(locked, lock.transaction_body.outputs[0])]
    return locked, additional, spend(locked, plutus_v3_script=[SCRIPT])


async def test_additional_utxo_may_not_restate_the_ledger(slow_devnet):
    devnet = slow_devnet
    locked, additional, cbor = await lock_in_the_mempool(devnet)

    chained = await evaluate(devnet, cbor, additional)
    assert [r["validator"] for r in chained["result"]] == [{"purpose": "spend", "index": 0}]

    await forge(devnet)  # now the ledger holds it
    unrelated = utxo_json(out_ref(1), TransactionOutput(PAYEE, 5 * ADA))
    overlapping = await evaluate(devnet, cbor, [unrelated, *additional])
    assert overlapping["error"]["code"] == 3002
    assert overlapping["error"]["data"] == {
        "overlappingOutputReferences": [output_reference_json(locked)]
    }
    assert (await evaluate(devnet, cbor))["result"] == chained["result"]  # the ledger's own


async def test_each_validator_that_cannot_run_is_named(slow_devnet):
    locked, key_locked, unknown = out_ref(2), out_ref(3), out_ref(4)
    additional = [
        utxo_json(locked, locked_at(SCRIPT)),
        utxo_json(key_locked, TransactionOutput(PAYEE, 5 * ADA)),
    ]
    cases = {
        3117: spend(unknown, plutus_v3_script=[SCRIPT]),
        3011: spend(locked),  # the script is nowhere
        3013: spend(  # the redeemer points at an input that no script locks
            locked, key_locked, at=ledger_order(locked, key_locked).index(key_locked)
        ),
    }
    for code, cbor in cases.items():
        response = await evaluate(slow_devnet, cbor, additional)
        assert response["error"]["code"] == 3010
        [failure] = response["error"]["data"]
        assert failure["error"]["code"] == code, failure
    assert failure["error"]["data"] == {
        "unsuitableOutputReference": output_reference_json(key_locked)
    }


async def test_no_script_context_for_a_v1_script_and_an_inline_datum(slow_devnet):
    locked = out_ref(5)
    additional = [utxo_json(locked, locked_at(V1_SCRIPT))]
    cbor = spend(locked, plutus_v1_script=[V1_SCRIPT], languages=[1])
    response = await evaluate(slow_devnet, cbor, additional)
    assert response["error"]["code"] == 3004
    assert "inline datum" in response["error"]["data"]["reason"]
