-- lease: Ranked counting (after prelude.lua), rule 15 without its duplicate
-- clause: every member whose carried score is an integer p < s keeps p, so
-- two members carrying one position (two versions of an interval reopened by
-- a backward clock step) share it. Not exclusive; kept only so that
-- redis-script-cost can measure what the clause costs on the keeper path,
-- side by side with crates/lease-core/src/scripts/ranked.lua.
-- ARGV[5] = token (32 hex digits), ARGV[6] = the last position this worker
--           knows (an integer), or -1 for a newcomer.
-- Scores in the set of an interval k:
--   a token that was in closed k-1: its position there (an integer);
--   a returnee (not in k-1): 2^32 + its sent position + 0.5;
--   a newcomer: 2^53.
-- Positions in a closed set of size s: a member whose score is an integer
-- p < s keeps p (a keeper); the others (fillers: carried p >= s, then
-- returnees by sent position, then newcomers, ties by token) take the free
-- positions in ascending order. Keepers' scores all lie below every
-- filler's, so a filler's rank among the fillers is its rank minus the
-- number of keepers. In a settled group every member is a keeper, and this
-- costs one ZSCORE and one ZCARD.
-- Reply: {1, k, sec, usec, position of the token in k-1 or -1, size of k-1}
local size = redis.call('ZCARD', KEYS[2])
local position = -1
local carried = redis.call('ZSCORE', KEYS[2], ARGV[5])
if carried then
  carried = tonumber(carried)
  if carried >= 0 and carried < size and carried == math.floor(carried) then
    position = carried
  else
    local rank = redis.call('ZRANK', KEYS[2], ARGV[5])
    local keepers = redis.call('ZRANGEBYSCORE', KEYS[2], 0, '(' .. size, 'WITHSCORES')
    local kept = {}
    for i = 2, #keepers, 2 do
      kept[tonumber(keepers[i])] = true
    end
    local j = rank - #keepers / 2
    for p = 0, size - 1 do
      if not kept[p] then
        if j == 0 then
          position = p
          break
        end
        j = j - 1
      end
    end
  end
end
local score
if position >= 0 then
  score = position
else
  local sent = tonumber(ARGV[6])
  if sent and sent >= 0 and sent < 4294967296 then
    score = 4294967296 + math.floor(sent) + 0.5
  else
    score = 9007199254740992
  end
end
redis.call('ZADD', KEYS[1], 'NX', score, ARGV[5])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {1, k, sec, usec, position, size}
