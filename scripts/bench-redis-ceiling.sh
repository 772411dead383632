#!/usr/bin/env bash
# docs/benchmarks.md, "One process, many groups": what one redis-server on
# this machine can run of the Ranked registration script with no lease
# client at all (redis-benchmark, 30,000 groups' keys, matching interval),
# from 1 or 50 connections, with 1 or 16 requests pipelined per connection.
# Each call is a newcomer's registration as a worker of protocol revision 3
# sends it (rule 19): 8 keys (k, k-1, the rules record, the member record,
# the filler cache of k-1, k+1, k-2, the filler cache of k; named in the
# group's hash tag {scale-N}: :k, :k1, :rules, :members, :k1:fillers, :k+1,
# :k2, :k:fillers) and 9 arguments (L, the key TTL 5 L, k, the rules record
# '3:86400000:ranked:modulo', the token, last position -1, no member name,
# older pair -1 -1). redis-benchmark draws each __rand_int__ of a call on
# its own, so one call's keys name different groups (one Redis: no
# cross-slot refusal); every group starts empty, so a call finds what a
# newcomer's first registration or one of its repeats finds (200,000 calls
# over 30,000 groups).
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
      evalsha "$sha" 8 "{scale-__rand_int__}:k" "{scale-__rand_int__}:k1" "{scale-__rand_int__}:rules" \
      "{scale-__rand_int__}:members" "{scale-__rand_int__}:k1:fillers" "{scale-__rand_int__}:k+1" \
      "{scale-__rand_int__}:k2" "{scale-__rand_int__}:k:fillers" \
      86400000 432000000 "$day" "3:86400000:ranked:modulo" 0123456789abcdef0123456789abcdef -1 "" -1 -1 2>&1 |
      tr '\r' '\n' | grep "requests per second" | tail -1 | sed 's/.*: \([0-9.]*\) requests per second.*/\1/')
    usec=$(redis-cli -p "$port" info commandstats | grep '^cmdstat_evalsha:' | sed 's/.*usec_per_call=\([0-9.]*\).*/\1/')
    echo "| $c | $p | $rps | $usec µs |"
  done
done
# One call answered as a registration, not refused: a wrong argument would
# be answered cheaply, and the figures would measure that.
reply=$(redis-cli -p "$port" evalsha "$sha" 8 "{scale-0}:k" "{scale-0}:k1" "{scale-0}:rules" \
  "{scale-0}:members" "{scale-0}:k1:fillers" "{scale-0}:k+1" "{scale-0}:k2" "{scale-0}:k:fillers" \
  86400000 432000000 "$day" "3:86400000:ranked:modulo" 0123456789abcdef0123456789abcdef -1 "" -1 -1 | sed -n 1p)
[ "$reply" = 1 ] || { echo "the script answered status $reply, not 1" >&2; exit 1; }
echo
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg); tree $(git rev-parse --short HEAD)"
