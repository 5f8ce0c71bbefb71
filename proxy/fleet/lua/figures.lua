-- The figures summed from the acks of one purge, taken away.
-- KEYS: epoch seq gen leases acks members log waiting waitfor purges floors pbytes figures
-- ARGV: number
local sums = redis.call('HGET', KEYS[13], ARGV[1])
redis.call('HDEL', KEYS[13], ARGV[1])
return sums
