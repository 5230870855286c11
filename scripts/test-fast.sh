#!/usr/bin/env bash
# Set up, then run the fast unit subset: every test that needs no devnet, docker engine,
# PostgreSQL, browser or GPU and is not marked slow (pyproject.toml lists the markers). For a
# quick check while working; scripts/test.sh runs everything. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest -q -n 2 \
  -m "not devnet and not docker and not postgres and not browser and not gpu and not slow" "$@"
