"""The renter's pages (`/app`): a browser wallet (CIP-30) rents GPUs from this market."""
