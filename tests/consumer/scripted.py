"""A scripted provider for the consumer's tests: a funded key that posts an offer, takes its
assignment, signs an acceptance, streams log lines, uploads a result archive and signs a
receipt, each step called by the test (so a test can stop anywhere, or sign with another key).
It stands in for the provider daemon being built beside the consumer."""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

import httpx
from pycardano import UTxO

from devnet.process import DevnetProcess
from offchain.chain.utxo import parse_out_ref
from offchain.protocol.job.jobspec import parse_jobspec
from offchain.protocol.job.receipt import EMPTY_HASH, Receipt
from offchain.protocol.ledger.payloads import acceptance_payload, sign
from offchain.protocol.tx.deployment import Deployment
from tests.market.client import Party
from tests.market.test_lifecycle import IMAGES
from tests.protocol.onchain import post_bond, wallet

GPU = "NVIDIA H100 80GB HBM3"
PRICE = 50_000  # lovelace per second of the bundle: 42 s pay more than a min-UTxO
EVIDENCE = hashlib.sha256(b"the metering record").digest()


def offer_terms(party: Party, **changes: Any) -> dict[str, Any]:
    return {
        "payout_address": str(party.wallet.address), "gpu_model": GPU, "gpu_count": 1,
        "vram_mib": 81_559, "cpu_cores": 16, "memory_mib": 131_072, "disk_mib": 512_000,
        "price_per_unit": PRICE, "images": IMAGES, **changes,
    }  # fmt: skip


@dataclasses.dataclass
class ScriptedProvider:
    party: Party
    deployment: Deployment
    http: httpx.AsyncClient

    @classmethod
    async def start(
        cls, devnet: DevnetProcess, deployment: Deployment, url: str, identity: str
    ) -> ScriptedProvider:
        http = httpx.AsyncClient(base_url=url, timeout=60)
        return cls(Party.new(http, identity, await wallet(devnet)), deployment, http)

    async def send(self, method: str, path: str, body: Any = None, **kw: Any) -> dict[str, Any]:
        answer = await self.party.send(method, path, body, **kw)
        assert answer.is_success, answer.text
        return answer.json()

    async def offer(self, **changes: Any) -> dict[str, Any]:
        return await self.send("POST", "/offers", offer_terms(self.party, **changes))

    async def bond(self, devnet: DevnetProcess) -> UTxO:
        return await post_bond(devnet, self.deployment, self.party.wallet)

    async def assignments(self) -> list[dict[str, Any]]:
        return await self.send("GET", "/providers/assignments?timeout_s=20")

    async def assignment(self) -> dict[str, Any]:
        assigned = await self.assignments()
        assert len(assigned) == 1, assigned
        return assigned[0]

    async def accept(self, job: dict[str, Any]) -> None:
        payload = acceptance_payload(
            self.deployment.network_id, self.deployment.escrow_hash, parse_out_ref(job["escrow"]),
            parse_jobspec(job["spec"]).job_id(), self.deployment.bond_hash,
        )  # fmt: skip
        body = {"signature": sign(self.party.wallet.key, payload).hex()}
        await self.send("POST", f"/jobs/{job['job_id']}/acceptance", body)

    async def run(self, job: dict[str, Any], lines: list[str]) -> None:
        await self.send("POST", f"/jobs/{job['job_id']}/start")
        await self.send("POST", f"/jobs/{job['job_id']}/logs", {"lines": lines})

    async def deliver(self, job: dict[str, Any], archive: bytes, units: int) -> None:
        """Upload `archive` and hand in the signed receipt for `units` of the job."""
        uploaded = await self.send("PUT", f"/jobs/{job['job_id']}/result", raw=archive)
        result = bytes.fromhex(uploaded["result_sha256"])
        body = Receipt.sign(
            self.party.wallet.key, self.deployment.network_id, self.deployment.settle_hash,
            parse_out_ref(job["escrow"]), units, result, EVIDENCE,
        ).body()  # fmt: skip
        await self.send("POST", f"/jobs/{job['job_id']}/receipt", body)

    async def refuse(self, job: dict[str, Any], reason: str) -> None:
        """Refuse the job with a zero-unit receipt, as the daemon does: its escrow comes back
        to the renter in the market's next settle batch."""
        zero = Receipt.sign(
            self.party.wallet.key, self.deployment.network_id, self.deployment.settle_hash,
            parse_out_ref(job["escrow"]), 0, EMPTY_HASH, EMPTY_HASH,
        ).body()  # fmt: skip
        await self.send("POST", f"/jobs/{job['job_id']}/failure", {"reason": reason,
                                                                  "receipt": zero})  # fmt: skip
