"""Where a job runs: this machine's docker engine (the runner itself), or a node of the
provider's Ray cluster (`ray_fleet`, each node's engine driven by its `node` actor)."""
