"""The provider's channel claims again, on a realistic chain in the normal suite (Praos blocks
and forks, `tests.chains`): every latest IOU claimed in one transaction, the provider paid to
the lovelace once, whichever block a fork moves the claim to."""

from __future__ import annotations

from tests.chains import realistic_devnet  # noqa: F401 - this module's devnet
from tests.provider.test_channels_claims import (  # noqa: F401 - collected here again
    deployment,
    test_the_schedule_claims_every_latest_iou_in_one_transaction,
)
