-- lease: graceful leave (rules 16 and 19), Ranked mode. Takes the caller's
-- token out of the count of the interval open when this script executes,
-- x, and out of the next one's reservation, and out of no other set: the
-- script decides x from TIME, never the caller.
-- KEYS[1], KEYS[2] = P{N}:c, P{N}:(c+1), for the interval c the caller
-- believes open and the one after it; KEYS[3] = P{N}:rules; KEYS[4] =
-- P{N}:(c+2); KEYS[5], KEYS[6], KEYS[7] = the filler caches of the three
-- sets, P{N}:c:fillers, P{N}:(c+1):fillers, P{N}:(c+2):fillers; an eighth
-- key, if declared (every lease request declares eight), is not touched.
-- ARGV[1] = interval in ms, ARGV[2] = c, ARGV[3] = the caller's rules
-- record, ARGV[4] = token, ARGV[5] = the interval of the newest reply to a
-- registration the caller processed (-1 if none).
-- Replies, integers only:
--   {2, k, sec, usec} when the recorded rules differ (nothing is written);
--   {0, k, sec, usec} when k is neither c nor c+1 (nothing is written; the
--     caller may retry once with the server time);
--   {1, k, sec, usec, removed} otherwise (removed: 1 if the token was
--     taken out of the count, else 0).
-- What it takes out (rule 19) depends on the token's entry in the set of
-- x. A registration in x overwrites its member's reservation there (score
-- + 0.25) with the score itself, and reserves its place in the set of x+1.
-- - A registration's score, or a caller that processed a reply from x (a
--   failover may have lost its registration's write, leaving the
--   reservation's score): the token registered in x and may hold a lease
--   from x. Its entry in x becomes a *left* entry (score -1): not counted
--   in the closed set (no position, not in its size, so the survivors
--   stop counting it in x), but still present, so that nobody inherits
--   its position of x-1 while that lease lives. Its reservation in x+1
--   goes.
-- - Otherwise a reservation's score: it has not registered in x, and its
--   entry goes: its leases come from x-1 or earlier and end by (x+1)L,
--   before anyone's grant from x+1 begins.
-- - A left entry, or no entry: nothing (a repeat of the request, a retry,
--   changes nothing more).
-- The only sets written are x and x+1, never a closed one, whatever the
-- caller named or however long the request was delayed. Each set it
-- changes loses its filler cache (rule 15: a cache is a memo of the set it
-- was computed from, and these sets have one only if a backward clock step
-- reopened them after they were read closed). ZREM creates nothing, and
-- ZADD XX only changes a member that is there.
if not KEYS[7] then
  return redis.error_reply('ERR lease: the leave script takes 7 keys')
end
local t = redis.call('TIME')
local sec = tonumber(t[1])
local usec = tonumber(t[2])
local k = math.floor((sec * 1000 + math.floor(usec / 1000)) / tonumber(ARGV[1]))
local rules = redis.call('GET', KEYS[3])
if rules and rules ~= ARGV[3] then
  return {2, k, sec, usec}
end
local c = tonumber(ARGV[2])
-- The sets of c, c+1, c+2 are KEYS[1], KEYS[2], KEYS[4], their caches
-- KEYS[5], KEYS[6], KEYS[7].
local set = {1, 2, 4}
local open
if k == c then
  open = 1
elseif k == c + 1 then
  open = 2
else
  return {0, k, sec, usec}
end
local score = tonumber(redis.call('ZSCORE', KEYS[set[open]], ARGV[4]))
local removed = 0
if score and score >= 0 then
  local frac = score % 1
  if (frac == 0.25 or frac == 0.75) and tonumber(ARGV[5]) ~= k then
    removed = redis.call('ZREM', KEYS[set[open]], ARGV[4])
  else
    redis.call('ZADD', KEYS[set[open]], 'XX', -1, ARGV[4])
    redis.call('ZREM', KEYS[set[open + 1]], ARGV[4])
    redis.call('DEL', KEYS[open + 5])
    removed = 1
  end
  redis.call('DEL', KEYS[open + 4])
end
return {1, k, sec, usec, removed}
