-- lease: Ranked counting (after prelude.lua), protocol revision 3: positions
-- are carried by the server as integers, a closed interval's positions fill
-- holes (rule 15), and a registration reserves its member's place in the
-- next interval (sticky return, rule 19).
-- KEYS[4] = P{N}:members, the member record (a hash: name -> 'token:j',
--           the identity holding the name and the last interval it
--           registered in), touched only under a member name.
-- KEYS[5] = P{N}:(k-1):fillers, the filler cache of the closed set (below),
--           touched only by a filler.
-- KEYS[6] = P{N}:(k+1), the set the reservation goes into.
-- KEYS[7] = P{N}:(k-2), read only by a returnee (its position there) and
--           for inheritance (rule 19).
-- KEYS[8] = P{N}:k:fillers, the filler cache of the set of k, deleted by a
--           registration that changes the base score of its member's entry
--           there (below); it exists only if a backward clock step reopened
--           k after it was read closed.
-- ARGV[5] = token (32 hex digits), ARGV[6] = the last position this worker
--           knows (an integer), or -1 for a newcomer, ARGV[7] = the member
--           name (rule 18), empty or absent for an anonymous worker,
--           ARGV[8], ARGV[9] = the worker's position in closed k-2 and that
--           set's size, as its previous reply (from k-1) told it, or -1
--           when it has none.
-- Every key is required: a caller that declares fewer gets an error
-- before anything is written.
-- Under a member name the set member is 'm:' .. name, so a restarted
-- process (a new token) carries the name's position. The token holds the
-- name if the record names it, or names another token whose last
-- interval j is at least two before k (its last lease, from j, ended by
-- (j+2)L <= kL): then the record becomes 'token:k'. Otherwise the name is
-- held by another process: the registration is still counted under the
-- name (its position survives a restart) but replies with status 3, and
-- the worker grants nothing from it.
-- Scores in the set of an interval k (a "base" score, and the same plus
-- 0.25 for a reservation, which a registration in k overwrites):
--   a member that was in closed k-1: its position there (an integer);
--   a returnee (not in k-1): 2^32 + its sent position + 0.5;
--   a newcomer: 2^40.
-- A graceful leave (leave.lua) turns the entry of a member that registered
-- in the open interval into a *left* entry, score -1: present (inheritance,
-- below, does not take its position) but not counted: the size of a closed
-- set is its number of entries with a score of 0 or more (ZCOUNT), and a
-- left entry has no position.
-- Positions in a closed set of size s, over its counted members in the
-- order of their base scores (the score without a reservation's 0.25),
-- ties by member: the first member whose base score is an integer p,
-- 0 <= p < s, keeps p (a keeper). Every other member is a filler, and the
-- fillers, in that order, take the free positions in ascending order. So the positions are a permutation of 0..s whatever the
-- scores (two versions of an interval reopened by a backward clock step,
-- rule 10, can carry one position to two members: only one keeps it).
-- Reply: {1, k, sec, usec, position in k-1 or -1, size of k-1,
--         registered, position in k-2 or -1, size of k-2 or -1,
--         inherited positions of k-2 ...}
-- (status 3 instead of 1 under a member name another token holds).
-- registered: 1 if the member's entry in closed k-1 is a registration, 0
-- if it is only a reservation (the member did not register in k-1: its
-- grant is short, rule 19). The position in k-2 is sent only when the
-- caller did not know it (ARGV[8] = -1); the size of k-2 whenever the
-- script read it; the inherited positions only under jump hash (the
-- caller's rules, ARGV[4], end in ':consistent': it holds task sets).
if not KEYS[8] then
  return redis.error_reply('ERR lease: the Ranked script takes 8 keys')
end
local member = ARGV[5]
local status = 1
if ARGV[7] and ARGV[7] ~= '' then
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
-- The position a score carries, if it carries one below s (rule 15): an
-- integer p, or p + 0.25 (a reservation of p).
local function carried(score, s)
  local p = math.floor(score)
  local frac = score - p
  if p >= 0 and p < s and (frac == 0 or frac == 0.25) then
    return p
  end
  return nil
end
-- Whether a score is a reservation's: the base scores end in .0 or .5.
local function reserved(score)
  local frac = score - math.floor(score)
  return frac == 0.25 or frac == 0.75
end
-- A score without its reservation mark: positions depend on base scores
-- only, ties by member, so a registration that overwrites its member's
-- reservation (score + 0.25 -> score) changes no position of the set, and
-- a filler cache computed before it stays right (rule 15, below).
local function base(score)
  if reserved(score) then
    return score - 0.25
  end
  return score
end
-- Whether member a comes before member b as Redis orders equal scores:
-- bytewise (memcmp, then the shorter first). Lua's own `<` on strings
-- follows the server's collation locale, which need not be bytewise.
local function before(a, b)
  for i = 1, math.min(#a, #b) do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then
      return x < y
    end
  end
  return #a < #b
end
-- The keeper of position p in a closed set: of the members whose score is
-- p or p + 0.25 (one, but after a backward step), the first by member,
-- with its score; nil when p has no keeper there.
local function keeper_of(key, p)
  local all = redis.call('ZRANGEBYSCORE', key, p, p .. '.25', 'WITHSCORES')
  local first, score = all[1], all[2]
  for i = 3, #all, 2 do
    if before(all[i], first) then
      first, score = all[i], all[i + 1]
    end
  end
  return first, score
end
-- The counted members of a closed set (scores of 0 or more) in the order
-- positions use: by base score, ties by member. Redis orders by score, so
-- only a run of one base (registrations at b, then reservations at b +
-- 0.25, each run ordered by member) needs merging: linear.
local function in_order(key)
  local all = redis.call('ZRANGEBYSCORE', key, 0, '+inf', 'WITHSCORES')
  local out = {}
  local i = 1
  while i <= #all do
    local b = base(tonumber(all[i + 1]))
    local j = i
    while j + 2 <= #all and base(tonumber(all[j + 3])) == b do
      j = j + 2
    end
    -- all[i..j] (pairs) share base b: registered first, then reserved;
    -- merge the two runs by member.
    local split = i
    while split <= j and not reserved(tonumber(all[split + 1])) do
      split = split + 2
    end
    local a, r = i, split
    while a < split or r <= j do
      if r > j or (a < split and before(all[a], all[r])) then
        out[#out + 1] = all[a]
        out[#out + 1] = all[a + 1]
        a = a + 2
      else
        out[#out + 1] = all[r]
        out[#out + 1] = all[r + 1]
        r = r + 2
      end
    end
    i = j + 2
  end
  return out
end
-- A filler's position (rule 15), from the filler cache of the closed set
-- (KEYS[5]): a hash from each filler to its position, with the set's
-- size under '#'. The first filler that reads the closed set computes the
-- positions of all its fillers at once (O(s), one ZRANGE) and writes
-- them; every later filler reads its own (O(1)), so the interval after a
-- mass change costs Redis one scan instead of one per filler. The cache is
-- a memo of a function of the set: it is used only while the set is the
-- one it was computed from. A closed set changes only if a backward clock
-- step reopens it (rule 10): a ZADD then either grows it (the size differs
-- from '#') or overwrites a member's reservation with its registration,
-- which changes no base score and so no position; the leave script, the
-- only one that removes members or turns them into left entries, deletes
-- the cache of each set it changes.
local function filler_position(size)
  if KEYS[5] then
    local cached = redis.call('HMGET', KEYS[5], '#', member)
    if cached[1] == string.format('%d', size) and cached[2] then
      return tonumber(cached[2])
    end
  end
  -- The counted members in order: the first carrying each p, 0 <= p < s,
  -- keeps p; the others, in order, take the free positions ascending.
  local all = in_order(KEYS[2])
  local kept = {}
  for i = 1, #all, 2 do
    local p = carried(tonumber(all[i + 1]), size)
    if p and not kept[p] then
      kept[p] = all[i]
    end
  end
  local fields = {'#', string.format('%d', size)}
  local free = 0
  local mine = -1
  for i = 1, #all, 2 do
    local p = carried(tonumber(all[i + 1]), size)
    if not p or kept[p] ~= all[i] then
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
local size = redis.call('ZCOUNT', KEYS[2], 0, '+inf')
local position = -1
-- The member's score in closed k-1, once known: it says whether its entry
-- there is a registration or only a reservation.
local entry = nil
-- In a settled group the position a worker sends (the last one it learnt)
-- is its score in k-1, so that score is tried first: if the first member
-- carrying it is this member, the member is a keeper there. The sent value
-- only picks the path: a keeper found through it carries that position, so
-- the position is the same function of the closed set either way. The
-- bounds go to Redis as strings built from the sent digits: a Lua number
-- argument costs a conversion on every call. No LIMIT: a position is
-- normally carried by one member (more only after a backward step), and
-- LIMIT's arguments cost more than the members they would leave out.
local hint = nil
if ARGV[6] and string.find(ARGV[6], '^%d+$') then
  hint = tonumber(ARGV[6])
  if hint < size then
    local first, score = keeper_of(KEYS[2], ARGV[6])
    if first == member then
      position = hint
      entry = tonumber(score)
    end
  end
end
-- An empty (or missing) closed set holds no one: nothing to look up.
if position < 0 and size > 0 then
  local raw = tonumber(redis.call('ZSCORE', KEYS[2], member))
  -- A left entry (this member left in k-1, rule 19) is not counted.
  if raw and raw >= 0 then
    entry = raw
    local p = carried(entry, size)
    if p and p ~= hint then
      if keeper_of(KEYS[2], p) == member then
        position = p
      end
    end
    if position < 0 then
      position = filler_position(size)
    end
  end
end
-- The score carried into k, as a number and as the string Redis is sent
-- (the sent digits, or a constant: no conversion in the common case).
local score, text
if position >= 0 then
  score = position
  if position == hint then
    text = ARGV[6]
  else
    text = string.format('%d', position)
  end
else
  local sent = tonumber(ARGV[6])
  if sent and sent >= 0 and sent < 4294967296 then
    score = 4294967296 + math.floor(sent) + 0.5
  else
    score = 1099511627776
  end
  text = score
end
-- The registration overwrites its reservation (score + 0.25) with the
-- score itself; a repeat writes the same score again, which changes
-- nothing. Only the write that creates a set sets its TTL and renews the
-- rules record: both then last from (k-1)L or later (a reservation in k-1
-- creates the set of k) for the TTL (5L), past every read of the set (as
-- k-1 in k+1 and as k-2 in k+2, before (k+3)L) and every lease granted in
-- k (each ends by (k+2)L); a set's members leave it only all together
-- (expiry, or ZREM of the last, which deletes the key, so the next ZADD
-- creates it again). A write costs Redis more than a read, so a ZADD that
-- adds a member reads ZCARD instead of writing two TTLs. A set whose only
-- member is the one just added did not exist before: Redis keeps no empty
-- sorted set.
local function created(key, added)
  if added == 1 and redis.call('ZCARD', key) == 1 then
    redis.call('PEXPIRE', key, ARGV[2])
    refresh_rules()
  end
end
local added = redis.call('ZADD', KEYS[1], text, member)
created(KEYS[1], added)
-- A set read closed keeps a filler cache (rule 15); it changes afterwards
-- only if a backward clock step reopens it. Adding a member changes its
-- size, which the cache checks; overwriting an entry changes no position
-- as long as its base score stays (the member's own reservation, made by
-- its registration in k-1 with the base of its entry in closed k-1). Any
-- other overwrite deletes the cache of k. Known without reading the entry:
-- in a settled group every registration overwrites its reservation with
-- the same base.
if added == 0 and not (entry and not reserved(entry) and base(entry) == score) then
  redis.call('DEL', KEYS[8])
end
-- The reservation (rule 19): the member stays in the set of k+1 with the
-- score it carries into k, marked (+0.25) as a reservation, unless it is
-- there already (its own registration in k+1 after a backward step, or an
-- earlier registration in k). A member that misses k+1 is still counted
-- in closed k+1 at its position: nobody fills its hole and nobody moves.
local reservation
if type(text) == 'string' and string.find(text, '^%d+$') then
  reservation = text .. '.25'
else
  reservation = score + 0.25
end
created(KEYS[6], redis.call('ZADD', KEYS[6], 'NX', reservation, member))
local registered = -1
local pos2, size2 = -1, -1
local inherited = {}
if position >= 0 then
  if reserved(entry) then
    registered = 0
  else
    registered = 1
  end
  -- The member's position in closed k-2, when its previous reply did not
  -- tell it (a lost reply, a missed registration): a keeper's only.
  local own2 = tonumber(ARGV[8])
  local m = tonumber(ARGV[9])
  if not (own2 and own2 >= 0 and m and m > own2) then
    own2, m = nil, nil
    size2 = redis.call('ZCOUNT', KEYS[7], 0, '+inf')
    local raw = redis.call('ZSCORE', KEYS[7], member)
    if raw then
      -- carried() refuses a left entry's -1.
      local p = carried(tonumber(raw), size2)
      if p and keeper_of(KEYS[7], p) == member then
        pos2 = p
        own2 = p
      end
    end
    m = size2
  end
  -- Inheritance (rule 19), under jump hash: a position q of closed k-2
  -- whose keeper is not in the set of k-1 at all (not even as a left
  -- entry) registered neither in k-2 (it would have reserved its place in
  -- k-1) nor in k-1, so it holds no lease from k-1 or later. Of the positions of k-2, jump hash moves to
  -- this member's position i in k-1 only tasks of i itself and of the
  -- positions at or beyond the size of k-1: those are the candidates
  -- (at most 8; leaving one out only grants less). Nothing to look for in
  -- a settled group (i is its own position in k-2 and no size shrank).
  local consistent = string.sub(ARGV[4], -11) == ':consistent'
  if consistent and (own2 ~= position or size < m) then
    if size2 < 0 then
      size2 = redis.call('ZCOUNT', KEYS[7], 0, '+inf')
    end
    local candidates = {}
    if own2 ~= position then
      candidates[1] = position
    end
    local q = size
    while q < m and #candidates < 8 do
      if q ~= own2 then
        candidates[#candidates + 1] = q
      end
      q = q + 1
    end
    for _, c in ipairs(candidates) do
      if c < size2 then
        local holder = keeper_of(KEYS[7], c)
        if holder and holder ~= member and not redis.call('ZSCORE', KEYS[2], holder) then
          inherited[#inherited + 1] = c
        end
      end
    end
  end
end
local reply = {status, k, sec, usec, position, size, registered, pos2, size2}
for _, c in ipairs(inherited) do
  reply[#reply + 1] = c
end
return reply
