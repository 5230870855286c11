"""/ready's verdict: each check named, passed or not, and why. Ready means this process can
do its work now: its database answers, its chain link answers, the follower (whichever process
runs it) is within `ready_follower_lag_blocks` of the chain's tip, some process leads, and
the settler's wallet (when the market has one) holds at least `ready_wallet_min_lovelace`."""

from __future__ import annotations

import dataclasses

from offchain.market.ops.probes import Observed
from offchain.market.settings import MarketSettings


@dataclasses.dataclass(frozen=True)
class Check:
    ok: bool
    detail: str


def checks(seen: Observed, settings: MarketSettings) -> dict[str, Check]:
    return {
        "database": _database(seen),
        "chain": _chain(seen, settings),
        "follower": _follower(seen, settings),
        "leader": _leader(seen),
        "settler_funds": _funds(seen, settings),
    }


def _database(seen: Observed) -> Check:
    if seen.database_error is not None:
        return Check(False, f"the database does not answer: {seen.database_error}")
    return Check(True, "answers")


def _chain(seen: Observed, settings: MarketSettings) -> Check:
    if seen.chain_error is not None:
        return Check(False, f"Ogmios at {settings.ogmios_url} does not answer: {seen.chain_error}")
    return Check(True, f"tip at height {seen.chain_height}")


def _follower(seen: Observed, settings: MarketSettings) -> Check:
    if seen.database_error is not None or seen.chain_error is not None:
        return Check(False, "unknown: needs both the database and the chain")
    if seen.followed_height is None:
        return Check(False, "the follower has applied no block yet")
    lag, most = seen.lag_blocks, settings.ready_follower_lag_blocks
    if lag is not None and lag > most:
        return Check(False, f"{lag} blocks behind the tip (at most {most}): stalled or slow")
    return Check(True, f"{lag} blocks behind the tip")


def _leader(seen: Observed) -> Check:
    if seen.leading:
        return Check(True, "this process leads")
    if seen.leader_elsewhere:
        return Check(True, "another process leads")
    if seen.leader_elsewhere is None:
        return Check(False, "unknown: the leader's lock could not be read")
    return Check(False, "no process leads: nobody follows the chain or settles")


def _funds(seen: Observed, settings: MarketSettings) -> Check:
    least = settings.ready_wallet_min_lovelace
    if settings.wallet_key is None:
        return Check(True, "no wallet: the market settles nothing itself")
    if seen.wallet_error is not None:
        return Check(False, f"the wallet's balance is unknown: {seen.wallet_error}")
    held = seen.wallet_lovelace or 0
    if held < least:
        return Check(False, f"the settler's wallet holds {held} lovelace, below {least}")
    return Check(True, f"holds {held} lovelace (at least {least})")
