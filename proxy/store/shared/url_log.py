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

A URL purge's record is also a *tombstone* for fills in flight: a fill whose lookup came
before the purge and which commits after it is refused by it (``Fill._admissible``). Once a
record is older than ``cache.url_purge_keep`` it is *retired* (retire.py, decision 0059): the
entries it covers are removed, fills from before it are refused by a per-domain floor instead
(``RETIRE``: the floor, and the number up to which the log is gone), and the record goes.
Readers then start past it, so the URL table every process holds shrinks too.

The keys start with NUL, as the purge state's meta records do: code that walks the domains'
records skips them (a domain name never starts with NUL).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import lmdb

from proxy.core.purge.purges import LastPurges

LOG = b"\x00url\x00"  # + domain + NUL + number: one URL purge
DEAD = b"\x00dead\x00"  # + domain: its log records up to the number held are dead
RETIRE = b"\x00retire\x00"  # + domain: (refuse fills under, log retired up to), 16 bytes
_PAIR = struct.Struct(">QQ")
_NUMBER = struct.Struct(">Q")
SWEEP = 512  # dead records dropped per write of the purge state, at most


def _prefix(domain: str) -> bytes:
    return LOG + domain.encode() + b"\x00"


def log_key(domain: str, number: int) -> bytes:
    return _prefix(domain) + _NUMBER.pack(number)


def pack(soft: bool, at: float, targets: Iterable[str]) -> bytes:
    return json.dumps([int(soft), at, list(targets)], separators=(",", ":")).encode()


class CorruptRecord(ValueError):
    """A log record whose value is not what ``pack`` writes (a torn or damaged page)."""


def unpack(value: bytes | memoryview) -> tuple[bool, float, list[str]]:
    """A record's value, as ``pack`` wrote it: soft, time, request-targets. The one place a
    record is parsed; anything else raises CorruptRecord."""
    try:
        soft, at, targets = json.loads(bytes(value))
    except (ValueError, TypeError) as error:  # not JSON, or not three fields
        raise CorruptRecord(str(error)) from None
    if not isinstance(at, int | float) or not isinstance(targets, list):
        raise CorruptRecord(f"unexpected fields {type(at).__name__}, {type(targets).__name__}")
    if not all(isinstance(target, str) for target in targets):
        raise CorruptRecord("a target that is not a string")
    return bool(soft), float(at), targets


def append(txn: lmdb.Transaction, domain: str, number: int, value: bytes) -> int:
    """Write one URL purge: the bytes it adds to the purge state (key and value)."""
    key = log_key(domain, number)
    txn.put(key, value)
    return len(key) + len(value)


def read(txn: lmdb.Transaction, domain: str, start: int, table: dict[str, LastPurges]) -> int:
    """Merge the domain's URL purges numbered ``start`` and above into ``table`` (target ->
    its last hard and soft purge), oldest first, so each target keeps its newest. Returns
    the number of the last record that does not parse (0: none): what it purged is unknown,
    so the caller reads it as a clear at that number; the records after it are read."""
    prefix = _prefix(domain)
    cursor = txn.cursor()
    corrupt = 0
    if not cursor.set_range(prefix + _NUMBER.pack(start)):
        return corrupt
    for key, value in cursor:
        if bytes(key[: len(prefix)]) != prefix:
            break
        number: int = _NUMBER.unpack_from(key, len(prefix))[0]
        try:
            soft, at, targets = unpack(value)
        except CorruptRecord:
            corrupt = number
            continue
        for target in targets:
            last = table.get(target)
            if last is None:
                table[target] = last = LastPurges()
            last.add(number, soft, at)
    return corrupt


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


def retirement(txn: lmdb.Transaction, domain: str) -> tuple[int, int]:
    """The domain's retirement (decision 0059): the number under which a fill's token is
    refused, and the number up to which its log records are retired (0, 0: none yet)."""
    value = txn.get(RETIRE + domain.encode())
    if value is None:
        return 0, 0
    refuse, retired = _PAIR.unpack(value)
    return int(refuse), int(retired)


def set_retirement(txn: lmdb.Transaction, domain: str, refuse: int, retired: int) -> None:
    """Raise the domain's refusal floor and retired number to at least these (never lower)."""
    held_refuse, held_retired = retirement(txn, domain)
    txn.put(
        RETIRE + domain.encode(), _PAIR.pack(max(held_refuse, refuse), max(held_retired, retired))
    )


@dataclass(frozen=True, slots=True)
class Due:
    """A domain's log records due to retire: up to ``upto``, covering ``covers`` (request
    target -> the newest number of the records retired that name it: an entry of the target
    with a mark under it is covered)."""

    domain: str
    upto: int
    covers: dict[str, int]


def due(
    txn: lmdb.Transaction,
    cutoff: float,
    limit: int,
    start_of: Callable[[str], int | None],
    corrupt: list[tuple[str, int]] | None = None,
) -> list[Due]:
    """The log records written at ``cutoff`` or before, oldest first per domain, at most
    ``limit`` targets in all (but at least one record): a domain's records are read from
    ``start_of(domain)`` on (past its clear and its retired ones; None: skip the domain).
    One seek per domain that has a log. A record that does not parse ends its domain's
    records here (what it covers is unknown, so nothing after it retires) and is added to
    ``corrupt`` (domain, number); the other domains go on."""
    found: list[Due] = []
    targets = 0
    cursor = txn.cursor()
    seek = LOG
    while targets < limit and cursor.set_range(seek):
        key = bytes(cursor.key())
        if not key.startswith(LOG):
            break
        name = key[len(LOG) : key.index(b"\x00", len(LOG))]
        seek = LOG + name + b"\x01"  # past this domain's records: the next domain's
        domain = name.decode()
        start = start_of(domain)
        if start is None:
            continue
        prefix = _prefix(domain)
        covers: dict[str, int] = {}
        upto = 0
        if cursor.set_range(prefix + _NUMBER.pack(start)):
            for record_key, value in cursor:
                if bytes(record_key[: len(prefix)]) != prefix:
                    break
                number = _NUMBER.unpack_from(record_key, len(prefix))[0]
                try:
                    _soft, at, record_targets = unpack(value)
                except CorruptRecord:
                    if corrupt is not None:
                        corrupt.append((domain, number))
                    break
                if at > cutoff or (upto and targets + len(record_targets) > limit):
                    break
                upto = number
                for target in record_targets:
                    covers[target] = upto
                targets += len(record_targets)
        if upto:
            found.append(Due(domain, upto, covers))
    return found


def remove(txn: lmdb.Transaction, domain: str, start: int, upto: int) -> tuple[int, int]:
    """Delete the domain's log records numbered ``start`` to ``upto``: the bytes they held
    (keys and values, as ``append`` counted them) and the URLs they named."""
    prefix = _prefix(domain)
    cursor = txn.cursor()
    freed = targets = 0
    if not cursor.set_range(prefix + _NUMBER.pack(start)):
        return 0, 0
    while True:
        key = cursor.key()
        if not key or bytes(key[: len(prefix)]) != prefix:
            break
        if _NUMBER.unpack_from(key, len(prefix))[0] > upto:
            break
        value = cursor.value()
        freed += len(key) + len(value)
        targets += len(unpack(value)[2])
        if not cursor.delete():  # moves to the next record; False past the last
            break
    return freed, targets


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
