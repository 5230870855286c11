"""Ogmios v6 access helpers: chain context, submit-and-wait, chain-sync follower."""

# Here rather than in `.ogmios`, which imports websockets: a CLI's defaults need no client.
DEFAULT_OGMIOS_URL = "ws://127.0.0.1:1337"
