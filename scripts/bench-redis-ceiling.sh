#!/usr/bin/env bash
# docs/benchmarks.md, "One process, many groups": what one redis-server on
# this machine can run of the Ranked registration script with no lease
# client at all (redis-benchmark, 30,000 groups' keys, matching interval),
# from 1 or 50 connections, with 1 or 16 requests pipelined per connection.
# Starts its own redis-server on a free loopback port and stops it.
#   scripts/bench-redis-ceiling.sh [DIR]   DIR holds prelude.lua and ranked.lua
#                                          (default crates/lease-core/src/scripts)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/private-redis.sh
scripts="${1:-crates/lease-core/src/scripts}"
cat "$scripts/prelude.lua" "$scripts/ranked.lua" > "$dir/ranked.lua"
sha=$(redis-cli -p "$port" script load "$(cat "$dir/ranked.lua")")
echo "| connections | pipelined per connection | registrations/s | script time per call (commandstats) |"
echo "| --- | --- | --- | --- |"
for c in 1 50; do
  for p in 1 16; do
    redis-cli -p "$port" flushall >/dev/null
    redis-cli -p "$port" config resetstat >/dev/null
    # Interval one day, so every call lands in the interval it names.
    day=$(( $(redis-cli -p "$port" time | head -1) / 86400 ))
    rps=$(redis-benchmark -p "$port" -q -n 200000 -r 30000 -c "$c" -P "$p" \
      evalsha "$sha" 3 "{scale-__rand_int__}:k" "{scale-__rand_int__}:k1" "{scale-__rand_int__}:rules" \
      86400000 259200000 "$day" "2:86400000:ranked:modulo" 0123456789abcdef0123456789abcdef -1 2>&1 |
      tr '\r' '\n' | grep "requests per second" | tail -1 | sed 's/.*: \([0-9.]*\) requests per second.*/\1/')
    usec=$(redis-cli -p "$port" info commandstats | grep '^cmdstat_evalsha:' | sed 's/.*usec_per_call=\([0-9.]*\).*/\1/')
    echo "| $c | $p | $rps | $usec µs |"
  done
done
echo
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
