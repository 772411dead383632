#!/usr/bin/env bash
# docs/benchmarks.md, "Real Redis: the registration against an empty script":
# Redis's side of one Ranked registration (INFO commandstats, usec per call
# of EVALSHA) against the floor, a script that only returns, called with the
# same 3 keys and 6 arguments, side by side on one redis-server started for
# it: same connections (50), same pipelining (1 and 16), same 30,000 groups
# (redis-benchmark's __rand_int__), in turns (ours, the floor, the commands
# alone, ours, ...). "The commands alone" runs the Redis commands our script
# runs for that call (TIME, GET of the rules record, ZCARD and, with a
# closed set, ZRANGEBYSCORE of k-1, ZADD NX and ZCARD of k, and the SET and
# PEXPIREs of a first registration) without the script's own logic: what
# the protocol's reads and writes cost Redis, below which no script of
# this protocol can go.
#   first:   fresh keys, a newcomer's arguments (ARGV[6] = -1): a group's
#            first registrations (those of scripts/bench-redis-ceiling.sh);
#   settled: every group's closed interval holds the token at position 0
#            and its rules record is there; the token sends 0 (a keeper).
# Last, what sticky return's reservation (rule 15's design, not built) would
# add to the commands of a keeper.
# Usage: scripts/bench-script-floor.sh [DIR] [ROUNDS]   DIR holds prelude.lua
#        and ranked.lua (default crates/lease-core/src/scripts), ROUNDS 2;
#        CASES= (empty) skips the redis-benchmark table.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/private-redis.sh
scripts="${1:-crates/lease-core/src/scripts}"
rounds="${2:-2}"
cat "$scripts/prelude.lua" "$scripts/ranked.lua" > "$dir/ranked.lua"
ours=$(redis-cli -p "$port" script load "$(cat "$dir/ranked.lua")")
floor=$(redis-cli -p "$port" script load "return {1, 0, 0, 0, -1, 0}")
# The commands alone: the open set's ZADD adds only ("nx", as ours) or
# also updates ("update", the reserving variant below), then an optional
# tail of Lua.
commands_script() { # nx|update [tail]
  local flags=""
  [ "$1" = nx ] && flags="'NX', "
  cat <<LUA
local t = redis.call('TIME')
local rules = redis.call('GET', KEYS[3])
if not rules then redis.call('SET', KEYS[3], ARGV[4], 'PX', ARGV[2]) end
if redis.call('ZCARD', KEYS[2]) > 0 then
  redis.call('ZRANGEBYSCORE', KEYS[2], ARGV[6], ARGV[6])
end
if redis.call('ZADD', KEYS[1], ${flags}0, ARGV[5]) == 1 and redis.call('ZCARD', KEYS[1]) == 1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  if rules then redis.call('PEXPIRE', KEYS[3], ARGV[2]) end
end
${2:-}
return {1, 0, 0, 0, -1, 0}
LUA
}
commands=$(redis-cli -p "$port" script load "$(commands_script nx)")
# The same with sticky return's reservation (docs/protocol.md, rule 15's
# design, not built): the open set of k holds the member's reservation, so
# the registration's ZADD of k updates it (no ZCARD), and the member
# reserves its place in k+1 (KEYS[4]) with ZADD NX and, when that adds,
# ZCARD of k+1 (and the TTL of a set it creates).
reserving=$(redis-cli -p "$port" script load "$(commands_script update "
if redis.call('ZADD', KEYS[4], 'NX', 0, ARGV[5]) == 1 and redis.call('ZCARD', KEYS[4]) == 1 then
  redis.call('PEXPIRE', KEYS[4], ARGV[2])
end")")
token=0123456789abcdef0123456789abcdef
rules="2:86400000:ranked:modulo"
groups=30000
calls=200000

# Lays out the settled state of every group redis-benchmark will name.
settle() {
  redis-cli -p "$port" eval "
    for i = 0, tonumber(ARGV[1]) - 1 do
      local g = string.format('{scale-%012d}', i)
      redis.call('ZADD', g .. ':k1', 0, ARGV[2])
      redis.call('SET', g .. ':rules', ARGV[3], 'PX', 259200000)
    end
    return 1" 0 "$groups" "$token" "$rules" >/dev/null
}

# One run: prints "registrations/s usec_per_call".
run() { # sha case pipelined [key count: 3, or 5 as a registration declares]
  local sha=$1 case=$2 p=$3 nkeys=${4:-3} sent
  local keys=("{scale-__rand_int__}:k" "{scale-__rand_int__}:k1" "{scale-__rand_int__}:rules")
  [ "$nkeys" = 5 ] && keys+=("{scale-__rand_int__}:members" "{scale-__rand_int__}:k1:fillers")
  redis-cli -p "$port" flushall >/dev/null
  if [ "$case" = settled ]; then settle; sent=0; else sent=-1; fi
  redis-cli -p "$port" config resetstat >/dev/null
  # Interval one day, so every call lands in the interval it names.
  local day=$(( $(redis-cli -p "$port" time | head -1) / 86400 ))
  local rps usec
  rps=$(redis-benchmark -p "$port" -q -n "$calls" -r "$groups" -c 50 -P "$p" \
    evalsha "$sha" "$nkeys" "${keys[@]}" \
    86400000 259200000 "$day" "$rules" "$token" "$sent" 2>&1 |
    tr '\r' '\n' | grep "requests per second" | tail -1 | sed 's/.*: \([0-9.]*\) requests per second.*/\1/')
  usec=$(redis-cli -p "$port" info commandstats | grep '^cmdstat_evalsha:' | sed 's/.*usec_per_call=\([0-9.]*\).*/\1/')
  echo "$rps $usec"
}

echo "| case | pipelined | round | ours µs/call | empty µs/call | ratio | commands alone µs/call | ours / commands | ours calls/s | empty calls/s | ratio |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for case in ${CASES-first settled}; do
  for p in 1 16; do
    for r in $(seq "$rounds"); do
      read -r ours_rps ours_us < <(run "$ours" "$case" "$p")
      read -r floor_rps floor_us < <(run "$floor" "$case" "$p")
      read -r _ commands_us < <(run "$commands" "$case" "$p")
      python3 - "$case" "$p" "$r" "$ours_us" "$floor_us" "$commands_us" "$ours_rps" "$floor_rps" <<'PY'
import sys
case, p, r, ou, fu, cu, orps, frps = sys.argv[1:]
ou, fu, cu, orps, frps = map(float, (ou, fu, cu, orps, frps))
print(f"| {case} | {p} | {r} | {ou:.2f} | {fu:.2f} | {ou/fu:.2f} | {cu:.2f} | {ou/cu:.2f} | {orps:,.0f} | {frps:,.0f} | {orps/frps:.2f} |")
PY
    done
  done
done
# Once per member: every call is a member's one registration of the
# interval (what a settled group sends), 10,000 groups of 16, piped over one
# connection (redis-cli --pipe): "newcomers" into fresh groups (ARGV[6] =
# -1), "keepers" with the closed set laid out and each sending its position.
once() { # sha case [reserved: the open sets hold every member's reservation]
  local sha=$1 case=$2 reserved=${3:-0}
  redis-cli -p "$port" flushall >/dev/null
  local day=$(( $(redis-cli -p "$port" time | head -1) / 86400 ))
  if [ "$case" = keepers ]; then
    redis-cli -p "$port" eval "
      for g = 0, 9999 do
        for j = 0, 15 do
          local m = string.format('%032x', g * 16 + j)
          redis.call('ZADD', '{m-' .. g .. '}:k1', j, m)
          if ARGV[2] == '1' then redis.call('ZADD', '{m-' .. g .. '}:k', j, m) end
        end
        redis.call('SET', '{m-' .. g .. '}:rules', ARGV[1], 'PX', 259200000)
      end
      return 1" 0 "$rules" "$reserved" >/dev/null
  fi
  python3 - "$sha" "$day" "$rules" "$case" "$reserved" > "$dir/once.resp" <<'PY'
import sys
sha, day, rules, case, reserved = sys.argv[1:]
out = sys.stdout.buffer
def cmd(*args):
    out.write(b"*%d\r\n" % len(args))
    for a in args:
        a = a.encode()
        out.write(b"$%d\r\n%s\r\n" % (len(a), a))
for j in range(16):
    for g in range(10000):
        sent = str(j) if case == "keepers" else "-1"
        keys = ["{m-%d}:k" % g, "{m-%d}:k1" % g, "{m-%d}:rules" % g]
        if reserved == "1":
            keys.append("{m-%d}:k2" % g)
        cmd("EVALSHA", sha, str(len(keys)), *keys,
            "86400000", "259200000", day, rules, "%032x" % (g * 16 + j), sent)
PY
  redis-cli -p "$port" config resetstat >/dev/null
  redis-cli -p "$port" --pipe < "$dir/once.resp" >/dev/null
  redis-cli -p "$port" info commandstats | grep '^cmdstat_evalsha:' | sed 's/.*usec_per_call=\([0-9.]*\).*/\1/'
}
echo
echo "| once per member | round | ours µs/call | empty µs/call | ratio | commands alone µs/call | ours / commands |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
for case in newcomers keepers; do
  for r in $(seq "$rounds"); do
    ours_us=$(once "$ours" "$case")
    floor_us=$(once "$floor" "$case")
    commands_us=$(once "$commands" "$case")
    python3 -c "import sys; o, f, c = map(float, sys.argv[3:]); print(f'| {sys.argv[1]} | {sys.argv[2]} | {o:.2f} | {f:.2f} | {o/f:.2f} | {c:.2f} | {o/c:.2f} |')" "$case" "$r" "$ours_us" "$floor_us" "$commands_us"
  done
done
echo
# What declaring keys costs: every lease request declares five (the member
# record and the filler cache after the three above; an anonymous keeper
# touches neither), the tables above three.
echo
echo "| declared keys, first, 1 pipelined | round | ours µs/call, 3 keys | 5 keys | ratio |"
echo "| --- | --- | --- | --- | --- |"
for r in $(seq "$rounds"); do
  read -r _ three < <(run "$ours" first 1 3)
  read -r _ five < <(run "$ours" first 1 5)
  python3 -c "import sys; t, f = map(float, sys.argv[2:]); print(f'| ours | {sys.argv[1]} | {t:.2f} | {f:.2f} | {f/t:.2f} |')" "$r" "$three" "$five"
done
echo
echo "| sticky return's reservation, once per member: keepers | round | commands alone µs/call | with the reservation | more | ours µs/call | ours, by as much more |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
# The commands alone and ours again, in turns with the reserving variant:
# on a noisy machine only figures taken side by side compare.
for r in $(seq "$rounds"); do
  commands_us=$(once "$commands" keepers)
  reserving_us=$(once "$reserving" keepers 1)
  ours_us=$(once "$ours" keepers)
  python3 -c "import sys; c, s, o = map(float, sys.argv[2:]); print(f'| keepers | {sys.argv[1]} | {c:.2f} | {s:.2f} | {s-c:+.2f} | {o:.2f} | {(o+s-c)/o:.2f} x |')" "$r" "$commands_us" "$reserving_us" "$ours_us"
done
echo
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) cores; $(redis-server --version | cut -d' ' -f3)"
