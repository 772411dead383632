-- lease: graceful leave (rules 16 and 19), Ranked mode. Takes the caller's
-- token out of the interval open when this script executes, x, or out of
-- the next one's reservation, and out of no other set: the script decides
-- x from TIME, never the caller.
-- KEYS[1], KEYS[2] = P{N}:c, P{N}:(c+1), for the interval c the caller
-- believes open and the one after it; KEYS[3] = P{N}:rules; KEYS[4] =
-- P{N}:(c+2); KEYS[5], KEYS[6], KEYS[7] = the filler caches of the three
-- sets, P{N}:c:fillers, P{N}:(c+1):fillers, P{N}:(c+2):fillers.
-- ARGV[1] = interval in ms, ARGV[2] = c, ARGV[3] = the caller's rules
-- record, ARGV[4] = token.
-- Replies, integers only:
--   {2, k, sec, usec} when the recorded rules differ (nothing is written);
--   {0, k, sec, usec} when k is neither c nor c+1 (nothing is written; the
--     caller may retry once with the server time);
--   {1, k, sec, usec, removed} otherwise (removed: 1 if the token was
--     taken out of a set, else 0).
-- Which set (rule 19): a registration in x overwrites its member's
-- reservation in the set of x (score + 0.25) with the score itself, and
-- reserves its place in the set of x+1. So when the token's score in x is a
-- registration's, it registered in x: it stays counted in x (it may hold a
-- lease from x, and a member absent from x would let others inherit its
-- position of x-1 while that lease lives), and only its reservation in x+1
-- goes: the survivors stop counting it in x+1. When its score in x is a
-- reservation's, it has not registered in x, and that entry goes: its
-- leases come from x-1 or earlier and end by (x+1)L, before anyone's
-- grant from x+1 begins. Deciding from the entry in x, not from the
-- reservation in x+1, makes a repeat of the request (a retry) change
-- nothing more: the first one took the reservation out of x+1, and the
-- entry in x still says the token registered there.
-- Either way the only set written is x or x+1, never a closed one,
-- whatever the caller named or however long the request was delayed.
-- When a removal takes the token out, the set's filler cache goes too
-- (rule 15: a cache is a memo of the set it was computed from, and these
-- sets have one only if a backward clock step reopened them after they
-- were read closed). ZREM creates nothing.
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
local score = redis.call('ZSCORE', KEYS[set[open]], ARGV[4])
local removed = 0
if score then
  local frac = tonumber(score) % 1
  local from = open + 1
  if frac == 0.25 or frac == 0.75 then
    from = open
  end
  removed = redis.call('ZREM', KEYS[set[from]], ARGV[4])
  if removed == 1 then
    redis.call('DEL', KEYS[from + 4])
  end
end
return {1, k, sec, usec, removed}
