"""The on-chain protocol off chain: types mirroring contracts/, signed payloads, tx builders."""
