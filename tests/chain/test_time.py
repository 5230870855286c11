"""Slot <-> POSIX time from era summaries, as the ledger converts validity bounds."""

from __future__ import annotations

import asyncio

import pytest

from offchain.chain.ogmios import request
from offchain.chain.time import ChainTime, PastHorizon, iso, read_chain_time


def summary(start_slot, start_s, end_slot, end_s, slot_ms):
    bound = lambda slot, s: {"time": {"seconds": s}, "slot": slot, "epoch": 0}  # noqa: E731
    return {
        "start": bound(start_slot, start_s),
        "end": bound(end_slot, end_s),
        "parameters": {"epochLength": 100, "slotLength": {"milliseconds": slot_ms}},
    }


# mainnet-like: 20 s Byron slots, then 1 s slots from slot 100 (2000 s after start)
TWO_ERAS = ChainTime.from_ogmios(
    "2017-09-23T21:44:51Z",
    [
        summary(0, 0, 0, 0, 20_000),
        summary(0, 0, 100, 2000, 20_000),
        summary(100, 2000, 500, 2400, 1000),
    ],
)
START_MS = 1506203091000


def test_conversion_follows_each_eras_slot_length():
    assert TWO_ERAS.slot_to_posix_ms(0) == START_MS
    assert TWO_ERAS.slot_to_posix_ms(99) == START_MS + 99 * 20_000
    assert TWO_ERAS.slot_to_posix_ms(100) == START_MS + 2_000_000
    assert TWO_ERAS.slot_to_posix_ms(101) == START_MS + 2_001_000
    assert TWO_ERAS.posix_ms_to_slot(START_MS + 2_001_999) == 101
    assert TWO_ERAS.posix_ms_to_slot(START_MS + 19_999) == 0
    for slot in (0, 57, 99, 100, 250, 499):
        assert TWO_ERAS.posix_ms_to_slot(TWO_ERAS.slot_to_posix_ms(slot)) == slot


def test_times_past_the_forecast_horizon_are_refused():
    with pytest.raises(PastHorizon, match="slot 500"):
        TWO_ERAS.slot_to_posix_ms(500)
    with pytest.raises(PastHorizon, match="2017-09-23T22:24:51Z"):
        TWO_ERAS.posix_ms_to_slot(START_MS + 2_400_000)


async def test_the_devnets_era_summaries_agree_with_its_genesis(devnet):
    shelley = await request(devnet.url, "queryNetwork/genesisConfiguration", {"era": "shelley"})
    slot_ms = shelley["slotLength"]["milliseconds"]
    chain = await asyncio.to_thread(read_chain_time, devnet.url)
    assert iso(chain.slot_to_posix_ms(0)) == shelley["startTime"]
    tip = (await request(devnet.url, "queryNetwork/tip"))["slot"]
    assert chain.slot_to_posix_ms(tip) - chain.slot_to_posix_ms(0) == tip * slot_ms
