#!/usr/bin/env bash
# Set up, then run the whole test suite (lint included) but the GPU tests. Extra arguments go
# to pytest. The fast unit subset alone, in about a minute: scripts/test-fast.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/setup-docker.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
# three workers on two cores: much of a test is waiting for blocks, containers and children
# the slowest tests and modules are listed at the end: the suite must stay within its
# 20-minute budget, and the longest modules belong in tests/conftest.py's LONGEST_FIRST
junit="$(mktemp -d)/junit.xml"
status=0
.venv/bin/python -m pytest -q -n 3 --dist loadfile -m "not gpu" --durations=30 \
  --junitxml="$junit" "$@" || status=$?
if [ -f "$junit" ]; then .venv/bin/python scripts/slowest_modules.py "$junit"; fi
exit "$status"
