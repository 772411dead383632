#!/usr/bin/env bash
# The test command of the README: installs what the tests need (redis-server
# and PostgreSQL, which the tests start themselves on free ports), then runs
# every test of the workspace. Extra arguments go to `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
  echo "redis-server not found: installing it (Debian package redis-server)" >&2
  if [ "$(id -u)" = 0 ]; then sudo=""; else sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq redis-server >/dev/null
  # The package may start a system service on 6379; the tests do not use it.
fi

# PostgreSQL for the push-down tests (lease-testkit's PostgresServer starts
# a private server on a free port; it never uses a system one on 5432).
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && [ -z "${LEASE_PG_BIN:-}" ]; then
  echo "PostgreSQL not found: installing it (Debian package postgresql)" >&2
  if [ "$(id -u)" = 0 ]; then sudo=""; else sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq postgresql >/dev/null
fi

# pg8000 (PyPI) for the Python example that `lease run`'s test runs.
if command -v python3 >/dev/null 2>&1 && ! python3 -c 'import pg8000' 2>/dev/null; then
  echo "pg8000 not found: installing it (PyPI)" >&2
  python3 -m pip install -q pg8000
fi

# node-postgres for the Node example, from its lock file (npm registry).
if command -v npm >/dev/null 2>&1 && [ ! -d examples/lease-run/node/node_modules/pg ]; then
  echo "installing the Node example's dependencies (npm ci)" >&2
  npm ci --prefix examples/lease-run/node --no-audit --no-fund --silent
fi

cargo test --workspace --all-features "$@"
