#!/usr/bin/env bash
# Set up, then run the demo: a devnet, the validators deployed, an escrow locked for a NumPy
# training job, the job run and metered in a hardened container, its receipt settling the escrow.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/setup-docker.sh
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"  # the provider's runner needs root (cgroups, loop mounts)
exec $sudo .venv/bin/unchained demo "$@"
