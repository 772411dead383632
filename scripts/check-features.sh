#!/usr/bin/env bash
# The feature combinations a user of the adapters can write, each checked on
# its own (`cargo check` of just the named packages, so cargo unifies only
# their features, as in a service that depends on them): each adapter with
# no features, its default, each feature alone; the adapters together with
# their defaults, with TLS on one side only, and with everything; and the
# two binaries that once did not build together (lease-cli has lease-redis's
# `tls`, lease-bench has lease-smol). lease-redis without `tokio` is not on
# the list alone: redis-rs's async side needs a runtime feature, which
# lease-smol brings (`smol-comp`), and `tls-client` with `tokio` is `tls`,
# without it what `lease-smol --features tls` checks. Extra arguments go to each `cargo`.
set -euo pipefail
cd "$(dirname "$0")/.."

combos=(
  "-p lease-core"
  "-p lease-driver --no-default-features"
  "-p lease-driver --all-features"
  "-p lease-redis"
  "-p lease-redis --features tls"
  "-p lease-redis --features metrics"
  "-p lease-fred"
  "-p lease-fred --features tls"
  "-p lease-fred --features metrics"
  "-p lease-smol"
  "-p lease-smol --features tls"
  "-p lease-smol --features metrics"
  "-p lease-redis -p lease-fred -p lease-smol"
  "-p lease-redis -p lease-smol --features lease-redis/tls"
  "-p lease-redis -p lease-smol --features lease-smol/tls"
  "-p lease-redis -p lease-fred -p lease-smol --all-features"
  "-p lease-cli -p lease-bench"
)
for combo in "${combos[@]}"; do
  start=$(date +%s)
  # shellcheck disable=SC2086 # each combo is a list of arguments
  cargo check -q $combo "$@"
  echo "ok: cargo check $combo ($(( $(date +%s) - start )) s)"
done
