"""Sample workloads for tests, benchmarks and the demo: never part of a provider's product path."""
