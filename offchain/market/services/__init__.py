"""The market's logic, knowing nothing of HTTP: quotes, jobs, the chain follower and index,
settlement, channels, rentals, leadership, scheduled work."""
