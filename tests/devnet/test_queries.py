"""State queries over the real socket: Ogmios schema shapes and what pycardano reads from them."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from devnet.params import ProtocolParameters
from tests.devnet.rpc import rpc_raw
from tests.ogmios_schema import validate

QUERIES = [
    ("queryNetwork/tip", None),
    ("queryNetwork/blockHeight", None),
    ("queryNetwork/startTime", None),
    ("queryNetwork/genesisConfiguration", {"era": "byron"}),
    ("queryNetwork/genesisConfiguration", {"era": "shelley"}),
    ("queryNetwork/genesisConfiguration", {"era": "alonzo"}),
    ("queryNetwork/genesisConfiguration", {"era": "conway"}),
    ("queryLedgerState/tip", None),
    ("queryLedgerState/epoch", None),
    ("queryLedgerState/eraStart", None),
    ("queryLedgerState/eraSummaries", None),
    ("queryLedgerState/protocolParameters", None),
    ("queryLedgerState/utxo", None),
]


@pytest.mark.parametrize(("method", "params"), QUERIES)
async def test_query_answers_match_the_ogmios_schema(devnet, method, params):
    response = await rpc_raw(devnet.url, method, params)
    assert "result" in response, response
    assert response["method"] == method and response["id"] == "test"
    validate(method, response)


async def test_utxo_by_address_and_by_reference(devnet):
    alice = str(devnet.address("alice"))
    by_address = await rpc_raw(devnet.url, "queryLedgerState/utxo", {"addresses": [alice]})
    validate("queryLedgerState/utxo", by_address)
    assert by_address["result"], "alice is funded at genesis"
    assert all(u["address"] == alice for u in by_address["result"])
    first = by_address["result"][0]
    ref = {"transaction": first["transaction"], "index": first["index"]}
    by_ref = await rpc_raw(devnet.url, "queryLedgerState/utxo", {"outputReferences": [ref]})
    validate("queryLedgerState/utxo", by_ref)
    assert by_ref["result"] == [first]


def test_pycardano_reads_the_chain(devnet):
    context = devnet.context()
    defaults = ProtocolParameters()
    assert context.epoch >= 1
    assert context.last_block_slot > 0
    params = context.protocol_param
    assert params.min_fee_constant == defaults.min_fee_constant
    assert params.min_fee_coefficient == defaults.min_fee_coefficient
    assert params.coins_per_utxo_byte == defaults.coins_per_utxo_byte
    assert params.max_tx_size == 16_384
    assert list(params.cost_models["PlutusV3"].values()) == defaults.cost_models["plutus:v3"]
    assert context.genesis_param.network_magic == 42
    assert context.genesis_param.slot_length == devnet.slot_length_ms


async def test_slot_and_time_agree_across_era_summaries_and_genesis(own_devnet):
    """On a devnet of its own: others' time travel moves the shared devnet's clock ahead."""
    devnet = own_devnet
    summaries = (await rpc_raw(devnet.url, "queryLedgerState/eraSummaries"))["result"]
    assert len(summaries) == 7
    conway = summaries[-1]
    assert conway["parameters"]["slotLength"]["milliseconds"] == devnet.slot_length_ms
    assert conway["end"]["slot"] > 0
    start = (await rpc_raw(devnet.url, "queryNetwork/startTime"))["result"]
    system_start_ms = (
        int(datetime.strptime(start, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()) * 1000
    )
    tip = (await rpc_raw(devnet.url, "queryNetwork/tip"))["result"]
    tip_time_ms = system_start_ms + tip["slot"] * devnet.slot_length_ms
    # The tip is a recent block: its slot's time is within the empty-block interval of now.
    assert abs(tip_time_ms - time.time() * 1000) < 20 * devnet.slot_length_ms + 5_000
    epoch = (await rpc_raw(devnet.url, "queryLedgerState/epoch"))["result"]
    assert epoch == tip["slot"] // conway["parameters"]["epochLength"]
