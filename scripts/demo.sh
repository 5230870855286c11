#!/usr/bin/env bash
# Set up, then run the demo: the whole market on this machine. A fresh devnet, the validators
# deployed, the market with its explorer and a provider daemon; a consumer submits a NumPy
# training job, follows it live, verifies its result; the market settles it. In a terminal the
# explorer stays up until Ctrl-C; otherwise (or with --exit) it stops once the job is settled.
# Its arguments go to `unchained demo`: --services shows endpoints and a pod paid over payment
# channels instead of jobs, --jobs N, --exit, --data-dir, --port, --realistic (Praos blocks
# and forks on the devnet).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/setup-docker.sh
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"  # the provider's runner needs root (cgroups, loop mounts)
exec $sudo .venv/bin/unchained demo "$@"
