-- The functions the scripts share; proxy/fleet/lua/__init__.py puts this before each script
-- that uses it (its '@ACKED@' is the ack hint's channel). What they read:
-- KEYS: epoch seq gen leases acks members log waiting waitfor
-- ARGV: (none)
local function fmt(n) return string.format('%.0f', n) end
local function clock()
  local t = redis.call('TIME')
  local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  return us, math.floor(us / 1000)
end
-- The epoch of the data set. None means the data was lost (or never made): start a new one
-- whose numbers begin at Valkey's time in microseconds, so they never go back.
local function epoch(nowus, nowms, fresh)
  local e = redis.call('HMGET', KEYS[1], 'id', 'born')
  if e[1] then return e[1], tonumber(e[2]) end
  local seq = tonumber(redis.call('GET', KEYS[2]) or '0')
  redis.call('HSET', KEYS[1], 'id', fresh, 'born', fmt(nowms))
  redis.call('SET', KEYS[2], fmt(math.max(seq, nowus)))
  return fresh, nowms
end
-- Drops expired members (their lease is over: they are fenced), then appends every live
-- member's name, lease expiry and ack to the reply.
local function live_view(nowms, reply)
  local expired = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', fmt(nowms))
  for _, m in ipairs(expired) do
    redis.call('ZREM', KEYS[4], m)
    redis.call('HDEL', KEYS[5], m)
    redis.call('HDEL', KEYS[6], m)
    redis.call('SREM', KEYS[8], m)
  end
  local live = redis.call('ZRANGE', KEYS[4], 0, -1, 'WITHSCORES')
  for i = 1, #live, 2 do
    reply[#reply + 1] = live[i]
    reply[#reply + 1] = live[i + 1]
    reply[#reply + 1] = redis.call('HGET', KEYS[5], live[i]) or '0'
  end
  return reply
end
-- Records a member's ack. The latest clear keeps the set of live members it waits for; the
-- ack that empties the set publishes one hint with the clear's number, so the control plane
-- hears once per clear, however many members there are (0014 "Ack hints").
local function record_ack(member, number)
  redis.call('HSET', KEYS[5], member, number)
  local waitfor = tonumber(redis.call('GET', KEYS[9]) or '0')
  if waitfor > 0 and tonumber(number) >= waitfor and redis.call('SREM', KEYS[8], member) == 1
      and redis.call('SCARD', KEYS[8]) == 0 then
    redis.call('PUBLISH', '@ACKED@', fmt(waitfor))
  end
end
