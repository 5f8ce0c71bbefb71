-- The purge records numbered between two numbers (a member reads those of the hints it
-- applies).
-- KEYS: epoch seq gen leases acks members log waiting waitfor purges
-- ARGV: lowest highest
return redis.call('ZRANGEBYSCORE', KEYS[10], ARGV[1], ARGV[2])
