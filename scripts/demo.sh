#!/usr/bin/env bash
# Set up, then run the demo: a devnet, two funded wallets, a payment and a Plutus script spend.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/unchained demo "$@"
