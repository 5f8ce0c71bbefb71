"""The shared tier's reads (decision 0030): ``lookup`` and ``peek`` judge what is stored
for a URL against the domain's purges (purge_state.py ``judge``), ``read_body`` streams a
body file checked chunk by chunk.

Reads run in the caller's thread: a read transaction on a shared map, no lock, no other
process involved. A reader never writes: an entry it finds dead or corrupt is doomed
(handles.py), removed by the next write. A fault is a miss (health.py).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import lmdb

from proxy.core.cache.entry import StoredResponse
from proxy.core.purge.purges import HARD, stale_lifetime
from proxy.errors import BodyCorrupt
from proxy.store.shared import bodies
from proxy.store.shared.handles import TierHandles
from proxy.store.shared.hits import MAX as HITS_MAX
from proxy.store.shared.purge_state import DISTRUSTED, STAMP, distrusted_copy, judge
from proxy.store.shared.records import (
    PREFIX_MAX,
    Corrupt,
    SharedHit,
    body_name,
    entry_prefix,
    unpack_entry,
    unpack_hit,
)

_stamp_of = STAMP.unpack_from  # bound once: the purge stamp is read on every hit


class SharedEntry(NamedTuple):
    """One stored variant as a lookup found it: the response (its body empty when the body
    is in a file: read it with ``SharedTier.read_body``), judged against the domain's purges
    (a soft purge has already shortened its freshness). A tuple: built on every hit."""

    response: StoredResponse
    length: int  # of the body
    key: bytes
    sequence: int
    table_crc: int
    path: Path | None  # the body file, None when inline (``response.body``)


class SharedLookup(NamedTuple):
    token: int  # the mark a fill made after this lookup stores under (SharedTier.begin)
    variants: tuple[SharedEntry, ...]  # most recent first


class TierReads(TierHandles):
    # -- reading ------------------------------------------------------------------------------

    def lookup(self, domain: str, target: str) -> SharedLookup:
        """The variants stored for the URL (``target`` as a key target: either scheme's),
        judged against the domain's purges; none on a fault, when stuck, or when none is.
        Each variant returned counts a hit (S3-FIFO's counter); one a hard purge covers is
        doomed (removed by the next write)."""
        return self._judged(domain, target, counted=True)

    def inspect(self, domain: str, target: str) -> SharedLookup:
        """``lookup``'s answer, changing nothing: no hit counted, nothing doomed (the trace's
        read, and the tests'). A fault is still reported to the tier's health."""
        return self._judged(domain, target, counted=False)

    def _judged(self, domain: str, target: str, *, counted: bool) -> SharedLookup:
        try:
            state = self.purges.current(domain)
            if not self._serving():
                return SharedLookup(state.number, ())
            found = self._read_variants(entry_prefix(domain, target), target, counted)
        except (lmdb.Error, OSError) as error:
            self.health.fault("lookup", error)
            return SharedLookup(0, ())
        variants = []
        for entry in found:
            covered = judge(state, entry.response.mark, target, entry.response.tags)
            if covered is None:
                pass
            elif covered is HARD:
                if counted:
                    self._doom(entry.key, entry.sequence)
                continue
            elif covered is DISTRUSTED:  # revalidated before it is served, or gone (0040)
                copy = distrusted_copy(entry.response)
                if copy is None:
                    if counted:
                        self._doom(entry.key, entry.sequence)
                    continue
                entry = entry._replace(response=copy)
            else:
                response = entry.response
                lifetime = stale_lifetime(
                    response.birth, response.freshness_lifetime, covered.stale_at
                )
                entry = entry._replace(response=response.copy_with(freshness_lifetime=lifetime))
            if counted:
                self.evictor.hit(entry.sequence)  # no write: a counter in a shared map (s3fifo.py)
            variants.append(entry)
        return SharedLookup(state.number, tuple(variants))

    def peek(self, domain: str, target: str) -> SharedHit | None:
        """``lookup``'s common case, for the edge's fast path (``TieredStore.peek_shared``):
        the URL's one variant when its body is inline and no purge covers it, else None,
        and ``lookup`` answers (none stored, several variants, a body in a file, covered by
        a soft purge, a fault, stuck). Judged as ``lookup`` judges, against the same state:
        a variant a hard purge covers is never returned, and is removed by the next write.
        The record is read every time; decoded once per version of its bytes (decoded.py)."""
        try:
            purges = self.purges  # ``purges.current(domain)``, its call made only when stale
            cached = purges.parsed.get(domain)
            if cached is not None and cached[0] == _stamp_of(purges.stamp)[0]:
                state = cached[1]
            else:
                state = purges.current(domain)
            # ``_serving``, its call made only when it has something to do (every hit).
            if (self.health.stuck or time.monotonic() >= self._next_check) and not self._serving():
                return None
            prefix = f"{domain} {target}\0".encode()  # ``entry_prefix``, its call saved
            if len(prefix) > PREFIX_MAX:
                return None  # a long target's hash as its key: lookup checks the target
            txn = self._env.begin(self.db_entries)  # bytes, not buffers: compared whole
            try:  # not ``with``: an abort is all a read needs, 1,300 instructions cheaper
                cursor = txn.cursor()
                if not cursor.set_key(prefix):
                    return None
                record = cursor.value()
                # Decoded already from these very bytes: the same hit, no CRC or decoding
                # again. Any other bytes (a new fill, a corrupted record) are checked afresh.
                kept = self._decoded.get(prefix)
                if kept is not None and kept[0] == record:
                    _, flags, sequence, hit = kept
                else:
                    flags, _, sequence, _, hit = unpack_hit(record)
                    self._decoded.keep(prefix, record, flags, sequence, hit)
                if cursor.next() and cursor.key().startswith(prefix):
                    return None  # several variants (Vary): lookup's, to choose among them
            except Corrupt as error:
                self.health.corrupted(f"{prefix!r}: {error}")
                self._doom(prefix, -1)
                return None
            finally:
                txn.abort()
        except (lmdb.Error, OSError) as error:
            self.health.fault("lookup", error)
            return None
        if flags:  # a body in a file
            return None
        # Judged as lookup judges, every time. Its tags are read only for an entry older than
        # an outstanding purge of the domain (``judge`` reads them only then), which costs a
        # response built; anything that covers it (a soft purge, a distrust) is lookup's.
        mark = hit.mark
        if mark >= state.top and mark >= state.cleared and mark >= state.distrusted:
            # ``judge``'s usual case (nothing covers it): S3-FIFO's counter raised, as lookup
            # raises it (no write), in place (``HitCounters.hit``) when it is S3-FIFO's.
            counters = self._counters
            if counters is None:
                self.evictor.hit(sequence)
            else:
                counts = counters.counts
                slot = sequence & counters.mask
                count = counts[slot]
                if count < HITS_MAX:
                    counts[slot] = count + 1
            return hit
        tags: tuple[str, ...] = ()
        if state.cleared <= mark < state.top:
            response = hit.response()
            if response is None:
                return None
            tags = response.tags
        covered = judge(state, mark, target, tags)
        if covered is not None:
            if covered is HARD:
                self._doom(prefix, sequence)
            return None
        self.evictor.hit(sequence)  # S3-FIFO's counter, as lookup raises it (no write)
        return hit

    def holds(self, domain: str, target: str) -> bool:
        """Whether any record is stored under the key target (a purge may cover it yet),
        changing nothing: no hit counted, nothing doomed. True on a fault: the caller then
        writes its purge anyway."""
        prefix = entry_prefix(domain, target)
        try:
            with self._env.begin(db=self.db_entries, buffers=True) as txn:
                cursor = txn.cursor()
                return cursor.set_range(prefix) and cursor.key()[: len(prefix)] == prefix
        except (lmdb.Error, OSError) as error:
            self.health.fault("lookup", error)
            return True

    def _serving(self) -> bool:
        """Whether the tier may serve a read: not stuck (its directory is checked once a
        second, for readers that never write)."""
        now = time.monotonic()
        if now >= self._next_check:  # a directory deleted under readers that never write
            self._next_check = now + 1.0
            self.check_directory()
        return not self.health.stuck

    def _read_variants(self, prefix: bytes, target: str, counted: bool) -> list[SharedEntry]:
        found: list[SharedEntry] = []
        with self._env.begin(db=self.db_entries, buffers=True) as txn:
            cursor = txn.cursor()
            if not cursor.set_range(prefix):
                return found
            for raw_key, value in cursor:
                key = bytes(raw_key)
                if not key.startswith(prefix):
                    break
                try:
                    header, response = unpack_entry(value, target)
                except Corrupt as error:
                    self.health.corrupted(f"{key!r}: {error}")
                    if counted:
                        self._doom(key, -1)
                    continue
                response.set_mark(header.mark)  # the mark it was stored under
                path = self.bodies / body_name(header.sequence) if header.in_file else None
                entry = SharedEntry(
                    response, header.body_length, key, header.sequence, header.table_crc, path
                )
                found.append(entry)
        if len(found) > 1:
            found.sort(key=lambda entry: entry.sequence, reverse=True)
        return found

    def read_body(
        self, entry: SharedEntry, start: int = 0, end: int | None = None
    ) -> Iterator[bytes]:
        """The entry's body (or the bytes ``start`` to ``end``, exclusive), checked chunk by
        chunk. BodyCorrupt when a chunk fails its checksum or cannot be read: the entry is
        then removed, and the bytes already yielded must not be sent as the whole body."""
        if entry.path is None:
            yield entry.response.body[start:end]
            return
        try:
            yield from bodies.chunks(entry.path, entry.length, entry.table_crc, start, end)
        except BodyCorrupt as error:
            self.health.corrupted(str(error))
            self._doom(entry.key, entry.sequence)
            raise
        except OSError as error:
            self.health.fault("read body", error)
            raise BodyCorrupt(f"{entry.path.name}: {error}") from None

    def read_all(self, entry: SharedEntry) -> bytes | None:
        """The whole body, checked; None when it fails (the entry is removed)."""
        try:
            return b"".join(self.read_body(entry))
        except BodyCorrupt:
            return None
