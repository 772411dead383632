-- lease: graceful leave (rule 16), Ranked mode. Removes the caller's token
-- from the set of the interval open when this script executes, and from no
-- other: the script decides that interval from TIME, never the caller.
-- KEYS[1] = P{N}:c and KEYS[2] = P{N}:(c+1), for the interval c the caller
-- believes open and the one after it; KEYS[3] = P{N}:rules; KEYS[4] and
-- KEYS[5] = P{N}:c:fillers and P{N}:(c+1):fillers, their filler caches
-- (only when five keys are declared: a four-key caller's fourth key was the
-- member record, which a leave never touches).
-- ARGV[1] = interval in ms, ARGV[2] = c, ARGV[3] = the caller's rules
-- record, ARGV[4] = token.
-- Replies, integers only:
--   {2, k, sec, usec} when the recorded rules differ (nothing is written);
--   {0, k, sec, usec} when k is neither c nor c+1 (nothing is written; the
--     caller may retry once with the server time);
--   {1, k, sec, usec, removed} otherwise (removed: 1 if the token was in
--     the set of k, else 0).
-- The only writes are ZREM on the key of k = floor(TIME / L), the open set,
-- and, when it removed the token, DEL of that set's filler cache (rule 15:
-- a cache is a memo of the set it was computed from, and the open set has
-- one only if a backward clock step reopened it after it was read closed).
-- A closed set (any interval before k) is never written, whatever the
-- caller named or how long the request was delayed. ZREM creates nothing.
local t = redis.call('TIME')
local sec = tonumber(t[1])
local usec = tonumber(t[2])
local k = math.floor((sec * 1000 + math.floor(usec / 1000)) / tonumber(ARGV[1]))
local rules = redis.call('GET', KEYS[3])
if rules and rules ~= ARGV[3] then
  return {2, k, sec, usec}
end
local c = tonumber(ARGV[2])
local removed
if k == c then
  removed = redis.call('ZREM', KEYS[1], ARGV[4])
  if removed == 1 and #KEYS == 5 then
    redis.call('DEL', KEYS[4])
  end
elseif k == c + 1 then
  removed = redis.call('ZREM', KEYS[2], ARGV[4])
  if removed == 1 and #KEYS == 5 then
    redis.call('DEL', KEYS[5])
  end
else
  return {0, k, sec, usec}
end
return {1, k, sec, usec, removed}
