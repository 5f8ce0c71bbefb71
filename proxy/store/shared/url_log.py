"""URL purges in the shared tier's purge state, as an append-only log (decision 0048).

A domain's URL purges used to live in its one JSON record, which every purge rewrote and
fsynced whole and every process parsed again after any purge: O(purges) per purge and per
catch-up. Now each URL purge is one record of its own, keyed by (domain, number)::

    key    LOG + domain + NUL + number (8 bytes, big-endian: LMDB orders a domain's by number)
    value  JSON [soft (0 or 1), time, [request-target, ...]]

in the same synced environment and the same transaction as the domain's record (which keeps
the small fields: numbers, bans, tags, the log's live bytes). A purge appends one record; a
reader keeps the URL table it built and reads only the records numbered after the last it
read (``read``), in the read transaction it reads the domain's record with, so the two agree.

A clear (or a fold, which is one) leaves the domain's older records behind: every number in
them is at or under the new ``cleared``, so they cover no entry a clear has not already made
a miss, and readers start past them. They are *buried* (``bury``: a DEAD marker naming the
domain and the number up to which its records are dead) and dropped a few hundred at a time
by every later write of the purge state (``sweep``), so a clear stays O(1) too.

The keys start with NUL, as the purge state's meta records do: code that walks the domains'
records skips them (a domain name never starts with NUL).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable

import lmdb

from proxy.core.purge.purges import LastPurges

LOG = b"\x00url\x00"  # + domain + NUL + number: one URL purge
DEAD = b"\x00dead\x00"  # + domain: its log records up to the number held are dead
_NUMBER = struct.Struct(">Q")
SWEEP = 512  # dead records dropped per write of the purge state, at most


def _prefix(domain: str) -> bytes:
    return LOG + domain.encode() + b"\x00"


def log_key(domain: str, number: int) -> bytes:
    return _prefix(domain) + _NUMBER.pack(number)


def pack(soft: bool, at: float, targets: Iterable[str]) -> bytes:
    return json.dumps([int(soft), at, list(targets)], separators=(",", ":")).encode()


def append(txn: lmdb.Transaction, domain: str, number: int, value: bytes) -> int:
    """Write one URL purge: the bytes it adds to the purge state (key and value)."""
    key = log_key(domain, number)
    txn.put(key, value)
    return len(key) + len(value)


def read(txn: lmdb.Transaction, domain: str, start: int, table: dict[str, LastPurges]) -> None:
    """Merge the domain's URL purges numbered ``start`` and above into ``table`` (target ->
    its last hard and soft purge), oldest first, so each target keeps its newest."""
    prefix = _prefix(domain)
    cursor = txn.cursor()
    if not cursor.set_range(prefix + _NUMBER.pack(start)):
        return
    for key, value in cursor:
        if bytes(key[: len(prefix)]) != prefix:
            break
        number: int = _NUMBER.unpack_from(key, len(prefix))[0]
        soft, at, targets = json.loads(bytes(value))
        for target in targets:
            last = table.get(target)
            if last is None:
                table[target] = last = LastPurges()
            last.add(number, bool(soft), float(at))


def bury(txn: lmdb.Transaction, domain: str, upto: int) -> None:
    """Mark the domain's log records numbered ``upto`` and below as dead (after a clear at
    ``upto``): ``sweep`` drops them."""
    key = DEAD + domain.encode()
    held = txn.get(key)
    if held is None or _NUMBER.unpack(held)[0] < upto:
        txn.put(key, _NUMBER.pack(upto))


def sweep(txn: lmdb.Transaction, limit: int = SWEEP) -> int:
    """Drop up to ``limit`` dead log records, in ``txn``: how many were dropped."""
    dropped = 0
    markers = txn.cursor()
    while dropped < limit and markers.set_range(DEAD):
        marker = bytes(markers.key())
        if not marker.startswith(DEAD):
            break
        upto: int = _NUMBER.unpack(markers.value())[0]
        prefix = LOG + marker[len(DEAD) :] + b"\x00"
        records = txn.cursor()
        done = not records.set_range(prefix)
        while not done and dropped < limit:
            key = bytes(records.key())
            if not key.startswith(prefix) or _NUMBER.unpack_from(key, len(prefix))[0] > upto:
                done = True
                break
            records.delete()  # moves to the next record
            dropped += 1
            done = not records.key()  # the last record of the database was deleted
        if not done:
            break  # the limit was reached: the rest is the next write's
        txn.delete(marker)
    return dropped


def dead_records(txn: lmdb.Transaction) -> int:
    """How many domains still have dead log records waiting for ``sweep`` (for tests)."""
    cursor = txn.cursor()
    count = 0
    if cursor.set_range(DEAD):
        for key in cursor.iternext(values=False):
            if not bytes(key).startswith(DEAD):
                break
            count += 1
    return count
