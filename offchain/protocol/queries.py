"""What protocol code asks the chain beyond pycardano's `ChainContext`: builders take any
ChainContext (what pycardano's TransactionBuilder needs) that also answers these few queries.

`offchain.chain.context.OgmiosContext` answers them over its own Ogmios; a service may hand
builders a context that answers from a cache, a test one that answers from a fixture.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from pycardano import ChainContext, ScriptHash, UTxO

from offchain.chain.time import ChainTime


@runtime_checkable
class ChainQueries(Protocol):
    """The chain reads builders need that pycardano's ChainContext does not declare."""

    def chain_time(self) -> ChainTime:
        """The chain's slot <-> POSIX time conversion (its era summaries)."""
        ...

    def utxo_by_tx_id(self, tx_id: str, index: int) -> UTxO | None:
        """The unspent output `tx_id#index`, or None (pycardano's Ogmios contexts have it)."""
        ...

    def script_reward_balance(self, script: ScriptHash) -> int | None:
        """The lovelace in the script's reward account; None when its stake credential is not
        registered (a deployment registers it). A settle withdraws exactly this."""
        ...


def queries(context: ChainContext) -> ChainQueries:
    """`context` as ChainQueries; TypeError naming what is missing for one that is not."""
    if isinstance(context, ChainQueries):
        return context
    raise TypeError(
        f"{type(context).__name__} answers no chain time, UTxO or stake queries: pass a "
        "context that implements offchain.protocol.queries.ChainQueries "
        "(offchain.chain.context.chain_context makes one over Ogmios)"
    )
