"""Depth before accepting money: an escrow merely at the tip can leave the chain in a fork (its
lock rolled back and never made again), after the provider promised the work. So an output
counts only once it has stayed on chain `confirm_blocks` blocks deep, counted from the first
tip the daemon saw it at: the count is conservative (an output older than that first sight
waits too), and needs no search for the block that made it. A fork that orphans that tip
starts the count again; one that takes the output away ends it (LookupError)."""

from __future__ import annotations

import time

from provider.daemon.chain import Chain
from provider.daemon.resume import Block, depth

PAUSE_S = 1.0  # between two looks at the chain while waiting for depth


class Confirmations:
    """Each output's first sight; its methods read the chain (call them through
    `Chain.call`, which holds the chain's context)."""

    def __init__(self, chain: Chain, blocks: int) -> None:
        self.chain = chain
        self.blocks = blocks
        self.sighted: dict[str, Block] = {}  # TXID#IX -> the tip it was first seen unspent at

    def deep_enough(self, ref: str) -> bool:
        """True once the output at `ref` (TXID#IX) has been on chain `blocks` deep; False
        while it is not yet, or was seen and is gone (a fork may bring it back): ask again
        later. LookupError: never seen, and not on chain."""
        if self.blocks <= 1:
            return True  # in a block: the caller's own read of the output says so
        chain = self.chain
        seen = self.sighted.pop(ref, None)
        deep = None if seen is None else depth(chain.url, seen)
        before = chain.tip_point()
        if chain.utxo(ref) is None:
            if seen is None:
                raise LookupError(f"no unspent output {ref} on chain")
            return False  # rolled back (or spent): counted anew if it comes back
        if deep is None:  # first sight, or the tip it was seen at is orphaned: count anew
            if chain.tip_point() == before:  # no block between the reads: it was there
                self.sighted[ref] = before
            return False
        if deep >= self.blocks:
            return True
        assert seen is not None  # a depth was read from it
        self.sighted[ref] = seen
        return False

    def wait(self, ref: str) -> None:
        """Return once the output at `ref` is deep enough, following the chain (no clock
        decides); LookupError once it is gone for good."""
        while not self.deep_enough(ref):
            time.sleep(PAUSE_S)
