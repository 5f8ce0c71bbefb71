-- Read only: every member with its info, lease expiry and ack, for the Nodes page.
-- KEYS: epoch seq gen leases acks members
-- ARGV: (none)
local t = redis.call('TIME')
local reply = {string.format('%.0f', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))}
local all = redis.call('HGETALL', KEYS[6])
for i = 1, #all, 2 do
  reply[#reply + 1] = all[i]
  reply[#reply + 1] = all[i + 1]
  reply[#reply + 1] = redis.call('ZSCORE', KEYS[4], all[i]) or '0'
  reply[#reply + 1] = redis.call('HGET', KEYS[5], all[i]) or '0'
end
return reply
