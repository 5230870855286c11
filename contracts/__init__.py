"""OpShin validators and their compiled artifacts."""

# The most escrows one batch settle holds within mainnet's limits (14M memory, 10B cpu, 16,384
# bytes), each with its own consumer, when each escrow is settled by its own receipt, as the
# market's batcher and a provider settling by itself do: bench/contracts.py measures 69 (size
# binds); 60 leaves room for a payout output per provider of a mixed batch. One claim over a
# batch fits 127.
SETTLE_BATCH_MAX = 60
