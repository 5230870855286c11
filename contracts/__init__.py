"""OpShin validators and their compiled artifacts."""

# The most escrows one batch settle holds within mainnet's limits (14M memory, 10B cpu, 16,384
# bytes), each with its own consumer: measured by bench/contracts.py. The market's batcher and
# a provider settling by itself make batches of at most this many by default.
SETTLE_BATCH_MAX = 41
