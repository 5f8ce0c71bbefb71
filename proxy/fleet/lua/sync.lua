-- A member's sync: registers (renews) and reads in one step, so a clear comes either before
-- (and its generation is read here) or after (and waits for this member's ack).
-- KEYS: epoch seq gen leases acks members log waiting waitfor purges floors
-- ARGV: member lease_ms member_epoch applied fresh_epoch info domains...
local nowus, nowms = clock()
local id = epoch(nowus, nowms, ARGV[5])
redis.call('ZADD', KEYS[4], fmt(nowms + tonumber(ARGV[2])), ARGV[1])
local seq = redis.call('GET', KEYS[2])
-- An ack counts only under the epoch the member has adopted (0014: acks carry the epoch),
-- and only up to this server's last clear: after a failover to a replica that missed the
-- last clears, a member may have applied numbers this server never handed out.
local ack = '0'
if ARGV[3] == id and tonumber(ARGV[4]) <= tonumber(seq or '0') then ack = ARGV[4] end
record_ack(ARGV[1], ack)
redis.call('HSET', KEYS[6], ARGV[1], ARGV[6])
local reply = {id, seq, '0'}
if (ARGV[3] ~= id or seq ~= ARGV[4]) then
  reply[3] = '1'
  if #ARGV >= 7 then
    local gens = redis.call('HMGET', KEYS[3], unpack(ARGV, 7))
    for i = 1, #ARGV - 6 do reply[#reply + 1] = gens[i] or '0' end
    -- Purges (decision 0026): each domain's floor, then the records of the member's
    -- domains above what it applied. A member of another epoch clears everything: none.
    local floors = redis.call('HMGET', KEYS[11], unpack(ARGV, 7))
    for i = 1, #ARGV - 6 do reply[#reply + 1] = floors[i] or '0' end
    if ARGV[3] == id then
      local mine = {}
      for i = 7, #ARGV do mine[ARGV[i]] = true end
      for _, r in ipairs(redis.call('ZRANGEBYSCORE', KEYS[10], '(' .. ARGV[4], '+inf')) do
        if mine[string.match(r, '^%d+ (%S+)')] then reply[#reply + 1] = r end
      end
    end
  end
end
return reply
