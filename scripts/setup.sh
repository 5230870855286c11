#!/usr/bin/env bash
# Set up everything Unchained needs on a fresh Debian machine: a virtualenv with the project.
# Idempotent: re-running only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

python=${PYTHON:-python3}
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "Python 3.11+ is required (set PYTHON=/path/to/python3.11)" >&2
  exit 1
fi
if ! "$python" -c 'import venv, ensurepip' 2>/dev/null; then
  apt-get update -qq && apt-get install -y -qq python3-venv
fi
# PostgreSQL for DATABASE_URL and the market's tests (they start throwaway clusters with it;
# the failover test makes a streaming standby with its pg_basebackup, from postgresql-client).
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql
fi
# Debian's Chromium for the explorer's browser tests (Playwright drives it; it downloads none).
if ! command -v chromium >/dev/null 2>&1; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium
fi
# Debian's tmux: the consumer's tests drive its live progress display in a real terminal.
if ! command -v tmux >/dev/null 2>&1; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tmux
fi
# Debian's OpenSSH client: `unchained pod ssh` runs it, the pod tests log in with it.
if ! command -v ssh >/dev/null 2>&1 || ! command -v ssh-keygen >/dev/null 2>&1; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-client
fi
# Debian's Prometheus and promtool: the metrics and alert rules tests (tests/ops) run them.
if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus
fi
[ -x .venv/bin/python ] || "$python" -m venv .venv
stamp=.venv/.installed-$(cat pyproject.toml contracts/toolchain.txt | sha256sum | cut -c1-16)
if [ ! -f "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -c contracts/toolchain.txt -e '.[dev,fleet]'
  touch "$stamp"
fi
