"""The on-chain protocol off chain: types mirroring contracts/, signed payloads, tx builders
and the one reader of transactions (`tx_reader`)."""
