#!/usr/bin/env bash
# docs/benchmarks.md, "Real Redis: the registration against an empty script":
# Redis's side of one Ranked registration (INFO commandstats, usec per call
# of EVALSHA) against the floor, a script that only returns (a reply of the
# same length), called with the same keys and arguments, side by side on one
# redis-server started for it. Every call is made as a worker of protocol
# revision 3 makes it (rule 19): 8 keys (k, k-1, the rules record, the
# member record, the filler cache of k-1, k+1, k-2, the filler cache of k)
# and 9 arguments (L, the key TTL 5 L, k, the rules record
# '3:86400000:ranked:modulo', the token, the last position, the member name
# '' (none), the position in k-2 and its size). Keys are named in one hash
# tag per group: {scale-N}:k, :k1 (k-1), :k2 (k-2), :k+1, :rules, ...
# First, redis-benchmark: same connections (50), same pipelining (1 and
# 16), same 30,000 groups (redis-benchmark draws each __rand_int__ of a call
# on its own, so one call's keys name different groups; every group is laid
# out alike, so each call still finds the layout it expects), in turns
# (ours, the floor, the commands alone, ours, ...). "The commands alone"
# runs the Redis commands our script runs for that call without the
# script's own logic: what the protocol's reads and writes cost Redis,
# below which no script of this protocol can go. For a settled keeper:
# TIME, GET of the rules record, ZCOUNT of k-1, ZRANGEBYSCORE k-1 p p.25
# WITHSCORES (the keeper of the position it sent), ZADD of k (no NX: it
# overwrites the member's reservation p.25 with p), ZADD NX of its
# reservation p.25 into k+1 and, when that adds, ZCARD of k+1, and the
# PEXPIREs of a set it creates (its TTL and the rules record's). For a
# newcomer: the SET of the rules record when there is none, ZCOUNT of k-1
# (empty: no lookup), ZADD of k and ZCARD when it adds, then as a keeper
# (a repeat, ZADD of k adding nothing, also deletes the filler cache of k).
# A keeper that sends its position in k-2 (a settled one does) reads
# nothing of k-2.
#   first:   fresh keys, a newcomer's arguments (last position -1, older
#            pair -1 -1): a group's first registrations (those of
#            scripts/bench-redis-ceiling.sh);
#   settled: every group's closed interval k-1 (and k-2) holds the token at
#            position 0, its open interval k the token's reservation 0.25
#            (made by its registration in k-1), and its rules record is
#            there; the token sends 0 and its pair in k-2, 0 of 1 (a keeper).
# Then once per member (every call a member's one registration of the
# interval), and the same against protocol revision 2 (the kept
# crates/lease-bench/src/bin/ranked-revision-2.lua after this prelude: 5
# keys, 6 arguments, rules '2:86400000:ranked:modulo', TTL 3 L, and no
# reservations) and its commands alone, in turns. Last, what the declared
# keys and arguments cost: the empty script called as revision 3 against
# as revision 2.
# Usage: scripts/bench-script-floor.sh [DIR] [ROUNDS]   DIR holds prelude.lua
#        and ranked.lua (default crates/lease-core/src/scripts), ROUNDS 2;
#        CASES= (empty) skips the redis-benchmark table.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/private-redis.sh
scripts="${1:-crates/lease-core/src/scripts}"
rounds="${2:-2}"
cat "$scripts/prelude.lua" "$scripts/ranked.lua" > "$dir/ranked.lua"
cat "$scripts/prelude.lua" crates/lease-bench/src/bin/ranked-revision-2.lua > "$dir/ranked-2.lua"
ours=$(redis-cli -p "$port" script load "$(cat "$dir/ranked.lua")")
ours2=$(redis-cli -p "$port" script load "$(cat "$dir/ranked-2.lua")")
floor=$(redis-cli -p "$port" script load "return {1, 0, 0, 0, -1, 0, -1, -1, -1}")
floor2=$(redis-cli -p "$port" script load "return {1, 0, 0, 0, -1, 0}")
# The commands alone, revision 3 (keys and arguments as above). The score a
# newcomer carries (2^40) is the script's; a keeper's is the position it
# sends. The closed set's lookup finds the keeper only in a settled group.
commands=$(redis-cli -p "$port" script load "$(cat <<'LUA'
local t = redis.call('TIME')
local rules = redis.call('GET', KEYS[3])
if not rules then redis.call('SET', KEYS[3], ARGV[4], 'PX', ARGV[2]) end
local score = ARGV[6]
if score == '-1' then score = '1099511627776' end
local keeper = false
if redis.call('ZCOUNT', KEYS[2], 0, '+inf') > 0 then
  keeper = redis.call('ZRANGEBYSCORE', KEYS[2], score, score .. '.25', 'WITHSCORES')[1] ~= nil
end
local function created(key, added)
  if added == 1 and redis.call('ZCARD', key) == 1 then
    redis.call('PEXPIRE', key, ARGV[2])
    if rules then redis.call('PEXPIRE', KEYS[3], ARGV[2]) end
  end
end
local added = redis.call('ZADD', KEYS[1], score, ARGV[5])
created(KEYS[1], added)
if added == 0 and not keeper then redis.call('DEL', KEYS[8]) end
created(KEYS[6], redis.call('ZADD', KEYS[6], 'NX', score .. '.25', ARGV[5]))
return {1, 0, 0, 0, -1, 0, -1, -1, -1}
LUA
)")
# The commands alone, revision 2 (5 keys, 6 arguments): TIME, GET of the
# rules record (SET when there is none), ZCARD of k-1 and, when it holds
# anyone, ZRANGEBYSCORE k-1 p p, ZADD NX of k and ZCARD when it adds, and
# the PEXPIREs when that creates k.
commands2=$(redis-cli -p "$port" script load "$(cat <<'LUA'
local t = redis.call('TIME')
local rules = redis.call('GET', KEYS[3])
if not rules then redis.call('SET', KEYS[3], ARGV[4], 'PX', ARGV[2]) end
if redis.call('ZCARD', KEYS[2]) > 0 then
  redis.call('ZRANGEBYSCORE', KEYS[2], ARGV[6], ARGV[6])
end
if redis.call('ZADD', KEYS[1], 'NX', 0, ARGV[5]) == 1 and redis.call('ZCARD', KEYS[1]) == 1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  if rules then redis.call('PEXPIRE', KEYS[3], ARGV[2]) end
end
return {1, 0, 0, 0, -1, 0}
LUA
)")
token=0123456789abcdef0123456789abcdef
rules="3:86400000:ranked:modulo"
groups=30000
calls=200000

# The keys and arguments a worker of revision REV (3 or 2) sends for the
# group whose hash tag holds G, into the array `req`: the key count, the
# keys, the arguments.
request() { # rev g day token last older_position older_size
  local g=$2 day=$3 token=$4 last=$5
  if [ "$1" = 3 ]; then
    req=(8 "{$g}:k" "{$g}:k1" "{$g}:rules" "{$g}:members" "{$g}:k1:fillers"
      "{$g}:k+1" "{$g}:k2" "{$g}:k:fillers"
      86400000 432000000 "$day" "$rules" "$token" "$last" "" "$6" "$7")
  else
    req=(5 "{$g}:k" "{$g}:k1" "{$g}:rules" "{$g}:members" "{$g}:k1:fillers"
      86400000 259200000 "$day" "2:86400000:ranked:modulo" "$token" "$last")
  fi
}

# Fails unless our script (either revision) answers the request in `req`
# with status 1 and position WANT (after a run: a repeat, which reads what
# the run's first call did): a wrong layout or argument would be answered
# with a cheap refusal, and the figures would measure that.
check() { # sha want
  [ "$1" = "$ours" ] || [ "$1" = "$ours2" ] || return 0
  local reply
  reply=$(redis-cli -p "$port" evalsha "$1" "${req[@]}" | tr '\n' ' ')
  case "$reply" in
    "1 "*) [ "$(echo "$reply" | cut -d' ' -f5)" = "$2" ] && return 0 ;;
  esac
  echo "unexpected reply to ${req[*]}: $reply" >&2
  exit 1
}

# Lays out the settled state of every group redis-benchmark will name
# (revision 3): k-1 and k-2 hold the token at 0, k its reservation.
settle() {
  redis-cli -p "$port" eval "
    for i = 0, tonumber(ARGV[1]) - 1 do
      local g = string.format('{scale-%012d}', i)
      redis.call('ZADD', g .. ':k1', 0, ARGV[2])
      redis.call('ZADD', g .. ':k2', 0, ARGV[2])
      redis.call('ZADD', g .. ':k', '0.25', ARGV[2])
      redis.call('SET', g .. ':rules', ARGV[3], 'PX', 432000000)
    end
    return 1" 0 "$groups" "$token" "$rules" >/dev/null
}

# One run: prints "registrations/s usec_per_call".
run() { # sha case pipelined [revision whose call it makes: 3, or 2 (first only)]
  local sha=$1 case=$2 p=$3 rev=${4:-3}
  redis-cli -p "$port" flushall >/dev/null
  # Interval one day, so every call lands in the interval it names.
  local day=$(( $(redis-cli -p "$port" time | head -1) / 86400 ))
  local last=-1 older=(-1 -1)
  if [ "$case" = settled ]; then settle; last=0 older=(0 1); fi
  request "$rev" "scale-__rand_int__" "$day" "$token" "$last" "${older[@]}"
  redis-cli -p "$port" config resetstat >/dev/null
  local rps usec
  rps=$(redis-benchmark -p "$port" -q -n "$calls" -r "$groups" -c 50 -P "$p" \
    evalsha "$sha" "${req[@]}" 2>&1 |
    tr '\r' '\n' | grep "requests per second" | tail -1 | sed 's/.*: \([0-9.]*\) requests per second.*/\1/')
  usec=$(redis-cli -p "$port" info commandstats | grep '^cmdstat_evalsha:' | sed 's/.*usec_per_call=\([0-9.]*\).*/\1/')
  request "$rev" "scale-000000000000" "$day" "$token" "$last" "${older[@]}"
  check "$sha" "$last"
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
# connection (redis-cli --pipe): "newcomers" into fresh groups (last
# position -1), "keepers" with the group laid out as the revision leaves it
# settled (revision 3: k-1 and k-2 hold member j at j, k its reservation
# j.25; revision 2: k-1 holds j at j) and each sending its position (and,
# revision 3, its pair in k-2, j of 16).
once() { # sha case [revision whose call it makes: 3, or 2]
  local sha=$1 case=$2 rev=${3:-3}
  redis-cli -p "$port" flushall >/dev/null
  local day=$(( $(redis-cli -p "$port" time | head -1) / 86400 ))
  if [ "$case" = keepers ]; then
    redis-cli -p "$port" eval "
      for g = 0, 9999 do
        local tag = '{m-' .. g .. '}'
        for j = 0, 15 do
          local m = string.format('%032x', g * 16 + j)
          redis.call('ZADD', tag .. ':k1', j, m)
          if ARGV[3] == '3' then
            redis.call('ZADD', tag .. ':k2', j, m)
            redis.call('ZADD', tag .. ':k', j .. '.25', m)
          end
        end
        redis.call('SET', tag .. ':rules', ARGV[1], 'PX', ARGV[2])
      end
      return 1" 0 "$([ "$rev" = 3 ] && echo "$rules" || echo 2:86400000:ranked:modulo)" \
      "$([ "$rev" = 3 ] && echo 432000000 || echo 259200000)" "$rev" >/dev/null
  fi
  # The requests, as request() builds them, for every member of every group.
  local -a keepers newcomers
  request "$rev" "m-G" "$day" T J J 16; keepers=("${req[@]}")
  request "$rev" "m-G" "$day" T -1 -1 -1; newcomers=("${req[@]}")
  if [ "$case" = keepers ]; then set -- "${keepers[@]}"; else set -- "${newcomers[@]}"; fi
  python3 - "$sha" "$@" > "$dir/once.resp" <<'PY'
import sys
sha, *template = sys.argv[1:]
out = sys.stdout.buffer
def cmd(args):
    out.write(b"*%d\r\n" % len(args))
    for a in args:
        a = a.encode()
        out.write(b"$%d\r\n%s\r\n" % (len(a), a))
for j in range(16):
    for g in range(10000):
        subst = {"T": "%032x" % (g * 16 + j), "J": str(j)}
        args = [subst.get(a, a).replace("{m-G}", "{m-%d}" % g) for a in template]
        cmd(["EVALSHA", sha] + args)
PY
  redis-cli -p "$port" config resetstat >/dev/null
  redis-cli -p "$port" --pipe < "$dir/once.resp" >/dev/null
  redis-cli -p "$port" info commandstats | grep '^cmdstat_evalsha:' | sed 's/.*usec_per_call=\([0-9.]*\).*/\1/'
  if [ "$case" = keepers ]; then
    request "$rev" "m-9999" "$day" "$(printf '%032x' 159999)" 15 15 16; check "$sha" 15
  else
    request "$rev" "m-9999" "$day" "$(printf '%032x' 159999)" -1 -1 -1; check "$sha" -1
  fi
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
# Revision 3 against revision 2, each called as its workers call it on the
# layout it leaves, in turns: on a noisy machine only figures taken side by
# side compare.
echo "| once per member, revision 3 against 2 | round | ours µs/call | revision 2 | ratio | commands alone | revision 2's commands alone | ratio | empty | revision 2's empty |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for case in newcomers keepers; do
  for r in $(seq "$rounds"); do
    ours_us=$(once "$ours" "$case")
    ours2_us=$(once "$ours2" "$case" 2)
    commands_us=$(once "$commands" "$case")
    commands2_us=$(once "$commands2" "$case" 2)
    floor_us=$(once "$floor" "$case")
    floor2_us=$(once "$floor2" "$case" 2)
    python3 -c "import sys; o, o2, c, c2, f, f2 = map(float, sys.argv[3:]); print(f'| {sys.argv[1]} | {sys.argv[2]} | {o:.2f} | {o2:.2f} | {o/o2:.2f} | {c:.2f} | {c2:.2f} | {c/c2:.2f} | {f:.2f} | {f2:.2f} |')" \
      "$case" "$r" "$ours_us" "$ours2_us" "$commands_us" "$commands2_us" "$floor_us" "$floor2_us"
  done
done
echo
# What declaring keys and sending arguments costs: the empty script called
# as revision 3 calls ours (8 keys, 9 arguments) against as revision 2 did
# (5 keys, 6 arguments).
echo "| declared keys and arguments, empty script, first, 1 pipelined | round | 5 keys, 6 arguments µs/call | 8 keys, 9 arguments | ratio |"
echo "| --- | --- | --- | --- | --- |"
for r in $(seq "$rounds"); do
  read -r _ two < <(run "$floor2" first 1 2)
  read -r _ three < <(run "$floor" first 1 3)
  python3 -c "import sys; t, f = map(float, sys.argv[2:]); print(f'| empty | {sys.argv[1]} | {t:.2f} | {f:.2f} | {f/t:.2f} |')" "$r" "$two" "$three"
done
echo
# What each command costs a settled keeper (revision 3, once per member as
# above): the commands a keeper runs, each on a line of its own, and the
# same with one of them left out, in turns with the empty script; the cost
# of a command is the median over the rounds (at least 5: a difference of
# two noisy figures) of (all - all but it). The
# reservation's line is its ZADD NX into k+1 and the ZCARD that follows a
# ZADD that adds (every keeper's, in a settled group). This is the floor
# the goals of docs/benchmarks.md are measured against: a goal of R x the
# empty script leaves (R - 1) x the empty script for every command.
keeper_commands=$(cat <<'LUA'
local t = redis.call('TIME') --TIME
local rules = redis.call('GET', KEYS[3]) --GET
local n = redis.call('ZCOUNT', KEYS[2], 0, '+inf') --ZCOUNT
local r = redis.call('ZRANGEBYSCORE', KEYS[2], ARGV[6], ARGV[6] .. '.25', 'WITHSCORES') --ZRANGEBYSCORE
local added = redis.call('ZADD', KEYS[1], ARGV[6], ARGV[5]) --ZADD
if redis.call('ZADD', KEYS[6], 'NX', ARGV[6] .. '.25', ARGV[5]) == 1 then redis.call('ZCARD', KEYS[6]) end --reservation
return {1, 0, 0, 0, -1, 0, -1, -1, -1}
LUA
)
declare -A without
for c in TIME GET ZCOUNT ZRANGEBYSCORE ZADD reservation; do
  without[$c]=$(redis-cli -p "$port" script load "$(printf '%s\n' "$keeper_commands" | grep -v -- "--$c\$")")
done
all=$(redis-cli -p "$port" script load "$keeper_commands")
# Two cheaper-looking forms of the same work, measured in the same turns:
# the reservation as one ZADD NX that also adds a marker member (-2 '#':
# the marker's presence, not ZCARD, says whether the set existed), and the
# keeper lookup as ZSCORE of the member plus ZCOUNT p p.25 (one carrier)
# instead of ZRANGEBYSCORE.
marker=$(redis-cli -p "$port" script load "$(printf '%s\n' "$keeper_commands" | sed \
  "s/^if redis.call('ZADD', KEYS\[6\], 'NX', ARGV\[6\] .. '.25', ARGV\[5\]) == 1 then redis.call('ZCARD', KEYS\[6\]) end --reservation\$/if redis.call('ZADD', KEYS[6], 'NX', ARGV[6] .. '.25', ARGV[5], '-2', '#') == 2 then redis.call('PEXPIRE', KEYS[6], ARGV[2]) end/")")
lookup=$(redis-cli -p "$port" script load "$(printf '%s\n' "$keeper_commands" | sed \
  "s/^local r = redis.call('ZRANGEBYSCORE', .*/local s = redis.call('ZSCORE', KEYS[2], ARGV[5]); local c = redis.call('ZCOUNT', KEYS[2], ARGV[6], ARGV[6] .. '.25')/")")
for sha in "$marker" "$lookup"; do
  [ "$sha" != "$all" ] || { echo "a variant of the keeper's commands did not change" >&2; exit 1; }
done
echo "| a settled keeper's commands, once per member | round | empty µs/call | all µs/call | without TIME | without GET | without ZCOUNT | without ZRANGEBYSCORE | without ZADD | without the reservation | reservation with a marker | lookup by ZSCORE, ZCOUNT |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
breakdown=()
for r in $(seq "$(( rounds > 5 ? rounds : 5 ))"); do
  line="$(once "$floor" keepers) $(once "$all" keepers)"
  for c in TIME GET ZCOUNT ZRANGEBYSCORE ZADD reservation; do
    line="$line $(once "${without[$c]}" keepers)"
  done
  line="$line $(once "$marker" keepers) $(once "$lookup" keepers)"
  breakdown+=("$line")
  echo "| keepers | $r | ${line// / | } |"
done
echo
printf '%s\n' "${breakdown[@]}" | python3 -c '
import statistics, sys
rows = [list(map(float, l.split())) for l in sys.stdin if l.strip()]
names = ["TIME", "GET", "ZCOUNT", "ZRANGEBYSCORE", "ZADD of k", "the reservation (ZADD NX, ZCARD)"]
empty = statistics.median(r[0] for r in rows)
every = statistics.median(r[1] - r[0] for r in rows)
print("| command | µs/call (median of all - without it) | × the empty script |")
print("| --- | --- | --- |")
for i, name in enumerate(names):
    d = statistics.median(r[1] - r[2 + i] for r in rows)
    print(f"| {name} | {d:.2f} | {d / empty:.2f} |")
print(f"| every command (all - empty) | {every:.2f} | {every / empty:.2f} |")
print(f"| the empty script | {empty:.2f} | 1.00 |")
print()
print("| a settled keeper: commands | µs/call, median | range |")
print("| --- | --- | --- |")
for i, name in [(1, "as they are"), (8, "the reservation with a marker, no ZCARD"), (9, "the lookup by ZSCORE and ZCOUNT p p.25")]:
    xs = [r[i] for r in rows]
    print(f"| {name} | {statistics.median(xs):.2f} | {min(xs):.2f}–{max(xs):.2f} |")
'
echo
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) cores; $(redis-server --version | cut -d' ' -f3); tree $(git rev-parse --short HEAD)"
