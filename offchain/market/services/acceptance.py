"""The provider's acceptance check, run by the market when it quotes: a quote its provider
would refuse once the renter locked is refused before, with the same reasons
(`offchain.protocol.checks.acceptance`)."""

from __future__ import annotations

from offchain.market.errors import Conflict
from offchain.market.models import Job, Offer, Provider
from offchain.market.services.chain import Chain, quoted_escrow
from offchain.market.services.offer_images import images_of
from offchain.market.services.offers import ACTIVE_BOND, quoted_bundle
from offchain.market.settings import MarketSettings
from offchain.protocol.checks.acceptance import Offered, describe, refusals
from offchain.protocol.checks.bond_check import covers_before
from offchain.protocol.job.jobspec import JobSpec
from offchain.protocol.ledger.types import EscrowDatum
from offchain.protocol.tx import escrow as escrows


def refuse(
    chain: Chain, settings: MarketSettings, job: Job, offer: Offer, provider: Provider,
    spec: JobSpec, now_ms: int, datum: EscrowDatum | None = None,
) -> None:  # fmt: skip
    """Conflict with the acceptance check's reasons (the first one's field) when the offer's
    provider would refuse the job on its quoted terms (`datum`, the job's quoted escrow, where
    the caller built it already); its bond, when it has one (or bonds are required), is taken
    as active: covering jobs closing a notice from now."""
    datum = datum or quoted_escrow(job)
    bonded = provider.bond_state == ACTIVE_BOND or settings.min_bond_lovelace > 0
    deployment = chain.deployment
    covers = (covers_before(deployment.notice_ms, deployment.refund_window_ms, None, now_ms)
              if bonded else None)  # fmt: skip
    locked = job.lock_lovelace  # `fit_allowance` raised it to the escrow output's min-UTxO
    assert locked is not None
    terms = escrows.acceptance_terms(
        chain.context, deployment, datum, locked, now_ms, covers, settings.settle_fee_share
    )
    bundle, price = quoted_bundle(offer, spec.resources)
    found = refusals(Offered(bundle, price, images_of(offer.body)), spec, terms)
    if found:
        raise Conflict(f"the provider would refuse this job: {describe(found)}", found[0].field)
