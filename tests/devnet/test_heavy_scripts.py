"""A heavy script is evaluated off the event loop: other clients keep getting answers."""

from __future__ import annotations

import asyncio

from pycardano import PlutusData, TransactionOutput

from devnet.genesis import ADA
from offchain.chain.ogmios import request
from tests.devnet.handwritten import compile_uplc
from tests.devnet.test_plutus import funded, lock, script_address, spend

# Counts down from 3,500 with a Z-combinator: about 10M memory and 2.4G cpu units, which
# takes the evaluator around a second.
COUNTDOWN = """
(program 1.1.0 (lam ctx
  [ [ (lam f [ (lam x [ f (lam v [ [ x x ] v ]) ]) (lam x [ f (lam v [ [ x x ] v ]) ]) ])
      (lam self (lam n
        (force [ [ [ (force (builtin ifThenElse))
                     [ [ (builtin lessThanEqualsInteger) n ] (con integer 0) ] ]
                   (delay (con unit ())) ]
                 (delay [ self [ [ (builtin subtractInteger) n ] (con integer 1) ] ]) ]))) ]
    (con integer 3500) ]))
"""


async def test_other_clients_are_answered_while_a_heavy_script_evaluates(devnet):
    heavy = compile_uplc(COUNTDOWN)
    key, owner = await funded(devnet)
    locked = await lock(devnet, key, owner, script_address(heavy), 5 * ADA, datum=PlutusData())
    tx = spend(devnet, key, owner, locked, 0, script=heavy)  # pycardano evaluates once here
    # Another transaction body (one lovelace less out), so the evaluation cache cannot answer.
    body = tx.transaction_body
    first = body.outputs[0]
    body.outputs[0] = TransactionOutput(first.address, first.amount.coin - 1)
    params = {"transaction": {"cbor": tx.to_cbor().hex()}}

    evaluation = asyncio.ensure_future(request(devnet.url, "evaluateTransaction", params))
    await asyncio.sleep(0.05)  # let the evaluation reach the server first
    answered_meanwhile = []
    while not evaluation.done():
        answered_meanwhile.append(await request(devnet.url, "queryNetwork/tip"))
    [result] = await evaluation
    assert result["budget"]["memory"] > 5_000_000
    assert len(answered_meanwhile) >= 3, "queries waited for the heavy evaluation"
