-- Kept for redis-script-cost and scripts/bench-script-floor.sh only: the
-- Ranked counting part of protocol revision 2 (rule 15, before sticky
-- return), exactly as crates/lease-core/src/scripts/ranked.lua was at
-- 3ff8465 (branch main), so that revision 3 can be measured against it side
-- by side. Run after the shipped prelude.lua (only its comments changed
-- since), called as a revision-2 worker called it: 5 KEYS [k, k-1, rules,
-- members, fillers of k-1], 6 ARGV [L, ttl = 3 L, k, rules record
-- '2:L:ranked:mapping', token, last position], and a member name as a
-- seventh only under one. Not shipped; no worker sends to it.
-- lease: Ranked counting (after prelude.lua), protocol revision 2: positions
-- are carried by the server as integers, and a closed interval's positions
-- fill holes (rule 15).
-- ARGV[5] = token (32 hex digits), ARGV[6] = the last position this worker
--           knows (an integer), or -1 for a newcomer, ARGV[7] = the member
--           name (rule 18), absent for an anonymous worker.
-- KEYS[4] = P{N}:members, the member record (a hash: name -> 'token:j',
--           the identity holding the name and the last interval it
--           registered in), touched only under a member name.
-- KEYS[5] = P{N}:(k-1):fillers, the filler cache of the closed set (below),
--           touched only by a filler.
-- Under a member name the set member is 'm:' .. name, so a restarted
-- process (a new token) carries the name's position. The token holds the
-- name if the record names it, or names another token whose last
-- interval j is at least two before k (its last lease, from j, ended by
-- (j+2)L <= kL): then the record becomes 'token:k'. Otherwise the name is
-- held by another process: the registration is still counted under the
-- name (its position survives a restart) but replies with status 3, and
-- the worker grants nothing from it.
-- Scores in the set of an interval k:
--   a token that was in closed k-1: its position there (an integer);
--   a returnee (not in k-1): 2^32 + its sent position + 0.5;
--   a newcomer: 2^53.
-- Positions in a closed set of size s: the first member (in the set's
-- order: by score, ties by token) with an integer score p, 0 <= p < s,
-- keeps p (a keeper). Every other member is a filler, and the fillers, in
-- the set's order (later members with a keeper's score, then carried
-- p >= s, then returnees by sent position, then newcomers), take the free
-- positions in ascending order. So the positions are a permutation of 0..s
-- whatever the scores: the two versions of an interval reopened by a
-- backward clock step (rule 10) can carry one position to two members of
-- the next set, and only one of them keeps it. In a settled group every
-- member is a keeper, and this costs one ZCARD and one ZRANGEBYSCORE of
-- the score it sent (is it the first member with that score?).
-- Reply: {1, k, sec, usec, position of the token in k-1 or -1, size of k-1},
-- status 3 instead of 1 under a member name another token holds.
local member = ARGV[5]
local status = 1
if ARGV[7] then
  member = 'm:' .. ARGV[7]
  local record = redis.call('HGET', KEYS[4], ARGV[7])
  local holder, last = nil, nil
  if record then
    holder, last = string.match(record, '^(%x+):(%d+)$')
    last = tonumber(last)
  end
  if holder and holder ~= ARGV[5] and last + 2 > k then
    status = 3
  else
    -- Never move the record's interval back (a backward clock step).
    local j = k
    if holder == ARGV[5] and last > k then
      j = last
    end
    redis.call('HSET', KEYS[4], ARGV[7], ARGV[5] .. ':' .. string.format('%d', j))
  end
  redis.call('PEXPIRE', KEYS[4], ARGV[2])
end
-- A filler's position (rule 15), from the filler cache of the closed set
-- (KEYS[5]): a hash from each filler to its position, with the set's
-- size under '#'. The first filler that reads the closed set computes the
-- positions of all its fillers at once (O(s), one ZRANGE) and writes
-- them; every later filler reads its own (O(1)), so the interval after a
-- mass change costs Redis one scan instead of one per filler. The cache is
-- a memo of a function of the set: it is used only while the set is the
-- one it was computed from. A closed set changes only if a backward clock
-- step reopens it (rule 10): ZADD NX then grows it (the size differs from
-- '#'), and the leave script, the only one that removes members, deletes
-- the cache of the set it removes from. A caller that declares no fifth
-- key gets the same positions, computed without the cache.
local function filler_position(size)
  if KEYS[5] then
    local cached = redis.call('HMGET', KEYS[5], '#', member)
    if cached[1] == string.format('%d', size) and cached[2] then
      return tonumber(cached[2])
    end
  end
  -- The members in order: the first of each integer score p, 0 <= p < s,
  -- keeps p; the others, in order, take the free positions ascending.
  local all = redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
  local kept = {}
  for i = 1, #all, 2 do
    local p = tonumber(all[i + 1])
    if p >= 0 and p < size and p == math.floor(p) and not kept[p] then
      kept[p] = all[i]
    end
  end
  local fields = {'#', string.format('%d', size)}
  local free = 0
  local mine = -1
  for i = 1, #all, 2 do
    local p = tonumber(all[i + 1])
    if kept[p] ~= all[i] then
      while kept[free] do
        free = free + 1
      end
      if all[i] == member then
        mine = free
      end
      fields[#fields + 1] = all[i]
      fields[#fields + 1] = string.format('%d', free)
      free = free + 1
    end
  end
  if KEYS[5] then
    -- Written fresh (a stale cache may list members that now keep), in
    -- chunks below Lua's stack limit for unpack, and expiring with the set.
    redis.call('DEL', KEYS[5])
    for i = 1, #fields, 1000 do
      redis.call('HSET', KEYS[5], unpack(fields, i, math.min(i + 999, #fields)))
    end
    local ttl = redis.call('PTTL', KEYS[2])
    if ttl <= 0 then
      ttl = ARGV[2]
    end
    redis.call('PEXPIRE', KEYS[5], ttl)
  end
  return mine
end
local size = redis.call('ZCARD', KEYS[2])
local position = -1
-- In a settled group the position a worker sends (the last one it learnt)
-- is its score in k-1, so that score is tried first: if the first member
-- with it is this token, the token is a keeper there. The sent value only
-- picks the path: a keeper found through it has that score, so the
-- position is the same function of the closed set either way. Scores go to
-- Redis as the strings they came in (the sent digits, ZSCORE's reply): a
-- Lua number argument costs a conversion on every call. No LIMIT: a score
-- is normally carried by one member (more only after a backward step), and
-- LIMIT's arguments cost more than the members they would leave out.
local hint = nil
if ARGV[6] and string.find(ARGV[6], '^%d+$') then
  hint = tonumber(ARGV[6])
  if hint < size then
    local first = redis.call('ZRANGEBYSCORE', KEYS[2], ARGV[6], ARGV[6])
    if first[1] == member then
      position = hint
    end
  end
end
-- An empty (or missing) closed set holds no one: nothing to look up.
if position < 0 and size > 0 then
  local raw = redis.call('ZSCORE', KEYS[2], member)
  if raw then
    local carried = tonumber(raw)
    local whole = carried >= 0 and carried < size and carried == math.floor(carried)
    if whole and carried ~= hint then
      local first = redis.call('ZRANGEBYSCORE', KEYS[2], raw, raw)
      if first[1] == member then
        position = carried
      end
    end
    if position < 0 then
      position = filler_position(size)
    end
  end
end
local score
if position >= 0 then
  score = position
  if position == hint then
    -- The same number, as the sent digits (no conversion).
    score = ARGV[6]
  end
else
  local sent = tonumber(ARGV[6])
  if sent and sent >= 0 and sent < 4294967296 then
    score = 4294967296 + math.floor(sent) + 0.5
  else
    -- 2^53 as Redis would print it: a string costs no conversion.
    score = '9007199254740992'
  end
end
-- Only the registration that creates the set of k sets its TTL and renews
-- the rules record: both then last from kL or later for 3L, past every
-- lease granted in k (each ends by (k+2)L), and a set's members leave it
-- only all together (expiry, or ZREM of the last, which deletes the key,
-- so the next ZADD creates it again). A write costs Redis more than a
-- read, so the other n-1 registrations of an interval read ZCARD instead
-- of writing two TTLs, and a repeat (ZADD NX adds nothing) does neither. A
-- set whose only member is the one just added did not exist before: Redis
-- keeps no empty sorted set.
if redis.call('ZADD', KEYS[1], 'NX', score, member) == 1
    and redis.call('ZCARD', KEYS[1]) == 1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  refresh_rules()
end
return {status, k, sec, usec, position, size}
