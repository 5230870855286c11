"""Key flows of the renter again, on a realistic chain in the normal suite: Praos blocks (one
slot in 20, on 25 ms slots) and forks up to 2 deep after one block in 10, with the market and
the provider waiting more blocks than a fork takes back (`tests.chains`). A job to its
settlement with its results verified, a refund and a slash, each with every balance checked
to the lovelace: a fork may move a transaction to another block, never pay it twice or lose
it. `UNCHAINED_TEST_CHAIN=realistic` runs the whole suite so."""

from __future__ import annotations

import pytest

from offchain.protocol.tx.deployment import Deployment
from tests.chains import realistic_devnet  # noqa: F401 - this module's devnet
from tests.consumer.test_sdk import (  # noqa: F401 - collected here again, on this chain
    test_a_job_from_spec_to_verified_results_and_settlement,
    test_refund_after_a_provider_never_starts,
    test_slash_after_a_provider_accepts_and_disappears,
)
from tests.protocol.conftest import NOTICE_MS, SLASH_SHARE_BPS, deployed


@pytest.fixture(scope="module")
async def consumer_deployment(devnet) -> Deployment:
    """The validators deployed on this module's chain (the session's are on another)."""
    return await deployed(devnet, NOTICE_MS, SLASH_SHARE_BPS)
