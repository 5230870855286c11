"""Sample services and their images for the tests, benchmarks and demo: never part of a
provider's own path."""
