"""A provider's offer as the escrow check reads it: who signs, where it is paid, and the price
per second of the bundle it quoted. Kept to what an escrow is checked against; the market's
offer (GPU model, bond, signature) builds on it.
"""

from __future__ import annotations

import dataclasses

from pycardano import Address

from offchain.protocol.jobspec import JobSpec, Resources


@dataclasses.dataclass(frozen=True)
class Offer:
    provider_vkey: bytes  # 32-byte ed25519 key: signs acceptances and receipts
    payout_address: Address  # full address, stake part included: settlements pay exactly it
    price_per_unit: int  # lovelace per second of the whole bundle
    bundle: Resources  # what one job gets for that price

    def shortfall(self, spec: JobSpec) -> str | None:
        """What `spec` asks beyond the bundle (None when the bundle covers it): the price was
        quoted for the bundle, not for more."""
        over = [
            f"{name} {getattr(spec.resources, name)} > {getattr(self.bundle, name)}"
            for name in Resources.model_fields
            if getattr(spec.resources, name) > getattr(self.bundle, name)
        ]
        return ", ".join(over) or None
