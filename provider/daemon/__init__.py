"""`unchained provider run`: the provider daemon. One small module per job: the market link,
the offer and heartbeat, capacity, the job loop, the journal, recovery, payouts and the bond."""
