"""A settle batch is bounded by its signed size, with a margin, before anything is sent: on a
devnet of its own whose maximum transaction size is lowered (restarted with the parameter, as
an update would change it) a byte under three escrows' batch, three receipts settle as a
batch of two and one of one, no transaction is refused (without the bound the ledger refused
the three and the batcher halved), each escrow is paid once, to the
lovelace. And the size the builder counts is the signed transaction's, to the byte."""

from __future__ import annotations

import asyncio
import json

import httpx
from pycardano import Transaction

from devnet.process import DevnetProcess
from offchain.market.db import make_engine
from offchain.market.models import Settlement, SettlementState
from offchain.market.services import settlement
from offchain.market.services.chain import Chain
from offchain.market.settings import MarketSettings
from offchain.protocol.ledger.split import settle_split
from offchain.protocol.tx import batch as batches
from offchain.protocol.tx import deployment_file
from offchain.protocol.tx.txbuild import SIZE_MARGIN, check_size
from tests.market.client import Party, serve
from tests.market.conftest import IDENTITY
from tests.market.flow import (
    UNITS,
    deliver,
    leader_settings,
    provider_with_offer,
    stored,
    wait_for,
)
from tests.market.test_lifecycle import PRICE, SPEC
from tests.market.test_settlement import funded_deals
from tests.protocol.conftest import NOTICE_MS, SLASH_SHARE_BPS, deployed
from tests.protocol.onchain import balance


async def test_a_batch_over_the_size_limit_is_cut_before_it_is_sent(tmp_path):
    devnet = DevnetProcess(tmp_path / "devnet").start()
    try:
        deployment = await deployed(devnet, NOTICE_MS, SLASH_SHARE_BPS)
        deployment_file.save(deployment, tmp_path / "deployment.json")
        plain = MarketSettings(
            data_dir=tmp_path / "market", ogmios_url=devnet.url, identity=IDENTITY,
            deployment=tmp_path / "deployment.json",
        )  # fmt: skip
        made, market = await leader_settings(
            plain, devnet, tmp_path, settle_batch_max=3, settle_wait_ms=60_000
        )
        with serve(made.model_copy(update={"wallet_key": None})) as url:  # settles nothing
            async with httpx.AsyncClient(base_url=url, timeout=60) as http:
                provider = await provider_with_offer(devnet, http, made.identity)
                deals = await funded_deals(devnet, deployment, http, made.identity, 3)
                for deal in deals:
                    await deliver(provider, deployment, deal)
                    await wait_for(deal.consumer, deal.job, "completed")

        engine = make_engine(made)
        batcher = settlement.Batcher(
            engine, Chain.connect(made.ogmios_url, made.deployment), market, made
        )
        receipts = [receipt for _, receipt in await asyncio.to_thread(batcher._collect)]
        engine.dispose()
        sizes = {}
        for count in (2, 3):
            unsigned = batches.settle(devnet.context(), deployment, receipts[:count],
                                      market.address)  # fmt: skip
            sizes[count] = check_size(unsigned, 1, 1 << 20)
            assert sizes[count] == len(market.sign(unsigned).to_cbor())  # to the byte
        limit = sizes[3] - 1  # the ledger refuses three; two fit with the margin to spare
        assert sizes[2] <= limit - SIZE_MARGIN, sizes

        devnet.stop()
        config = tmp_path / "smaller.toml"
        config.write_text(f"[protocol_parameters]\nmax_tx_size = {limit}\n")
        devnet = DevnetProcess(
            devnet.data_dir, port=devnet.port, extra_args=("--config", str(config))
        ).start()
        assert devnet.context().protocol_param.max_tx_size == limit
        before = balance(devnet, provider.wallet.address)
        with serve(made.model_copy(update={"settle_wait_ms": 0})) as url:  # all three wait
            async with httpx.AsyncClient(base_url=url, timeout=60) as http:
                for deal in deals:
                    renter = Party.new(http, made.identity, deal.consumer.wallet)
                    await wait_for(renter, deal.job, "settled")

        rows = stored(made, Settlement)
        assert {row.state for row in rows} == {SettlementState.CONFIRMED}  # none refused
        txs = [Transaction.from_cbor(bytes.fromhex(row.tx_cbor)) for row in rows]
        assert sorted(len(json.loads(row.escrows)) for row in rows) == [1, 2]
        assert all(len(tx.to_cbor()) <= limit - SIZE_MARGIN for tx in txs)
        lovelace = deals[0].escrow.output.amount.coin
        split = settle_split(lovelace, PRICE, UNITS, SPEC["max_duration_s"], deals[0].fee_allowance)
        assert balance(devnet, provider.wallet.address) == before + 3 * split.provider  # once
    finally:
        devnet.stop()
