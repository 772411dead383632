#!/usr/bin/env bash
# docs/benchmarks.md, "Real Redis": each table starts its own redis-server on
# a free loopback port (lease-testkit), never the system's 6379.
#   scripts/bench-redis.sh settled     16 workers, 1,000 intervals at 300/200/100/75/50 ms (~13 min)
#   scripts/bench-redis.sh scale       10,000 groups over one connection, L = 1 s, both modes (~3 min)
#   scripts/bench-redis.sh big         one group of 1,000/5,000/10,000 workers, L = 1 s (~2 min per size)
#   scripts/bench-redis.sh throughput  registrations/s against redis-benchmark (~1 min)
#   scripts/bench-redis.sh alloc       allocations per registration through each adapter (~30 s)
#   scripts/bench-redis.sh all         the three, in this order
# Arguments after the table's name go to its binary.
# PIN_REDIS_CPU=1 PIN_CLIENT_CPU=0 run the benchmark's redis-server on core 1
# and the binary on core 0 (taskset), so Redis's INFO commandstats times
# the script alone and not its wait for a core the client holds.
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in redis-server redis-benchmark; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "$tool not found: install the Debian package redis-server (scripts/test.sh does)" >&2
    exit 1
  fi
done
what="${1:-all}"
shift || true
cargo build -q --release -p lease-bench --bins
bin=target/release
[ -n "${CARGO_TARGET_DIR:-}" ] && bin="$CARGO_TARGET_DIR/release"
if [ -n "${PIN_REDIS_CPU:-}" ]; then
  pin_dir=$(mktemp -d)
  trap 'rm -rf "$pin_dir"' EXIT
  printf '#!/bin/sh\nexec taskset -c %s %s "$@"\n' "$PIN_REDIS_CPU" "$(command -v redis-server)" > "$pin_dir/redis-server"
  chmod +x "$pin_dir/redis-server"
  export REDIS_SERVER_BIN="$pin_dir/redis-server"
fi
pin=()
[ -n "${PIN_CLIENT_CPU:-}" ] && pin=(taskset -c "$PIN_CLIENT_CPU")
case "$what" in
  settled) "${pin[@]}" "$bin/redis-settled" "$@" ;;
  scale) "${pin[@]}" "$bin/redis-scale" "$@" ;;
  big) "${pin[@]}" "$bin/redis-big-group" "$@" ;;
  throughput) "${pin[@]}" "$bin/redis-throughput" "$@" ;;
  alloc) "${pin[@]}" "$bin/alloc-count" --adapters "$@" ;;
  all)
    "${pin[@]}" "$bin/redis-settled"
    "${pin[@]}" "$bin/redis-scale"
    "${pin[@]}" "$bin/redis-throughput"
    ;;
  *) echo "usage: $0 [settled|scale|big|throughput|alloc|all] [args]" >&2; exit 2 ;;
esac
