-- lease: the part both registration scripts share (rules 2 and 12).
-- KEYS[1] = P{N}:k, KEYS[2] = P{N}:k-1 for the interval k the caller expects,
-- KEYS[3] = P{N}:rules, the group's rules record.
-- ARGV[1] = interval in ms, ARGV[2] = key TTL in ms, ARGV[3] = expected k,
-- ARGV[4] = the caller's rules record, 'version:interval_ms:mode:mapping'.
-- Replies, integers only:
--   {2, k, sec, usec, version, interval_ms, mode, mapping} when the recorded
--     rules differ from the caller's (nothing is written; fields of a record
--     that cannot be read are -1; mode: 0 arrival, 1 ranked; mapping:
--     0 modulo, 1 consistent);
--   {0, k, sec, usec} when the server's interval is not the expected one
--     (nothing is written; the caller re-aims with the server time);
--   otherwise the counting part's reply, below.
local t = redis.call('TIME')
local sec = tonumber(t[1])
local usec = tonumber(t[2])
local k = math.floor((sec * 1000 + math.floor(usec / 1000)) / tonumber(ARGV[1]))
local rules = redis.call('GET', KEYS[3])
if rules and rules ~= ARGV[4] then
  local v, l, m, p = string.match(rules, '^(%d+):(%d+):(%a+):(%a+)$')
  local code = {arrival = 0, ranked = 1, modulo = 0, consistent = 1}
  return {2, k, sec, usec, tonumber(v) or -1, tonumber(l) or -1, code[m] or -1, code[p] or -1}
end
if k ~= tonumber(ARGV[3]) then
  return {0, k, sec, usec}
end
-- The TTL must be a positive integer as Redis writes one (no sign, no
-- leading zero) before anything is written: the counting part writes
-- first and renews TTLs after, and must not fail between the two.
if not (string.find(ARGV[2], '^[1-9]%d*$') and #ARGV[2] <= 15) then
  return redis.error_reply('ERR lease: the key TTL is not a positive integer')
end
-- Recorded by the first registration, renewed by each counting part
-- (refresh_rules) whenever it creates a set: every lease granted in k
-- comes from a registration counted in the set of k, which was created at
-- (k-1)L or later (Ranked: by a reservation in k-1; Arrival: at kL or
-- later), so the record outlives it (the TTL, 5L for Ranked and 3L for
-- Arrival, against 2L). A record that is there holds exactly ARGV[4]
-- (checked above), so renewing its TTL leaves what SET would, for less of
-- Redis's time.
if not rules then
  redis.call('SET', KEYS[3], ARGV[4], 'PX', ARGV[2])
end
local function refresh_rules()
  if rules then
    redis.call('PEXPIRE', KEYS[3], ARGV[2])
  end
end
