"""The protocol deployed on the session's devnet for the provider's chain tests, and the
deployment file the provider's commands read."""

from __future__ import annotations

from pathlib import Path

from devnet.process import DevnetProcess
from offchain.protocol.tx import deployment_file
from offchain.protocol.tx.deployment import Deployment, deploy
from tests.protocol.onchain import NOTICE_MS, REFUND_WINDOW_MS, SLASH_SHARE_BPS, confirm, wallet


async def deployed(devnet: DevnetProcess, file: Path) -> Deployment:
    """Deploy the validators from a fresh wallet and write the deployment file at `file`."""
    deployer = await wallet(devnet)
    (tx,), made = deploy(
        devnet.context(), deployer.address, 0, NOTICE_MS, SLASH_SHARE_BPS, REFUND_WINDOW_MS
    )
    await confirm(devnet, deployer.sign(tx))
    deployment_file.save(made, file)
    return made
