"""S3-FIFO for the shared tier: its queues in LMDB, its counters in a shared map (decision 0029).

The algorithm is ``proxy.store.eviction.S3FIFO``'s (libCacheSim's, with its defaults: small
queue 10% of the capacity, ghost 90%, moved to main at 2 hits, counters to 3), over the
tier's entries and their costs in bytes (``Fill.cost``: record, key and body), with one
change for large objects (below). Replayed against the pure policy, the tier misses on the
same requests (tests/store/shared/test_s3fifo.py), across a restart and with two processes.

Where each part lives:

- **The queues**, durably, in the entries environment, written only inside a fill's commit
  (the one LMDB writer of the node at a time), so a restart, or a kill -9 after a commit,
  keeps them as they were: ``s3.small`` and ``s3.main`` (position -> sequence, cost, entry
  key: FIFOs in key order), ``s3.ghost`` (position -> key digest, cost) with its index
  ``s3.ghostkeys`` (digest -> position, cost), ``s3.place`` (entry key -> its queue,
  position, sequence and cost: a removal is O(1), no search), and ``s3.state`` (the bytes in
  each queue, the next position, whether anything was evicted yet). Positions come from one
  counter, big-endian, so LMDB's order is each queue's age.
- **The counters**, one byte per entry in a file every process maps (hits.py): a hit in any
  process raises its entry's counter with one store, no write transaction and no fsync; the
  commit reads and lowers them. What a write transaction sets is held aside (``_Pending``)
  and applied once it commits (``committed``), as a change from what it read, so hits that
  came meanwhile count; a transaction that aborts changes no counter (``aborted``). A
  reader finds the counter from the entry's sequence alone (``sequence % slots``), so the
  commit picks the new entry's sequence among the next few whose slot no stored entry holds
  (``next_sequence``): two entries share a counter only when nearly every slot is taken.

Eviction is O(1) amortised per insert: every step moves or drops the oldest key of a queue
(``cursor.first``), a move lowers a counter, and counters only rise with hits; never a scan.

**Large objects.** libCacheSim's S3-FIFO never admits an object as large as the small queue
(10% of the capacity) unless the ghost remembers it, and never remembers it either: it would
never be cached. A CDN must still cache a large download the first time (an operator who
fetches a download twice expects the second to be a hit, and the first fill's collapsed
requests are answered from what it stored), so here an object up to half the capacity
(``LARGE_AT_ONCE``) is admitted at its first fill straight into the main queue, as any key the
ghost remembers. A larger one's first fill is not kept but its key is remembered in the ghost,
and its next fill within the ghost's memory is admitted into the main queue. When the body's
length is known, the edge asks first (``kept_if_filled``, read only) and writes nothing of a fill
that would be refused; ``remember`` then puts its key in the ghost. Size the tier at
twice the largest object or more. (``S3FIFO(..., remember_large=True)`` is the same rule in the
pure policy, for the benchmark and the tests.)
"""

from __future__ import annotations

import hashlib
import struct
from pathlib import Path

import lmdb

from proxy.store.eviction.s3fifo import (
    GHOST_RATIO,
    LARGE_AT_ONCE,
    MAIN_MAX_FREQ,
    MOVE_TO_MAIN,
    SMALL_RATIO,
)
from proxy.store.shared.evict import Admission, Evictor
from proxy.store.shared.health import Health
from proxy.store.shared.hits import MAX as MAX_COUNT
from proxy.store.shared.hits import HitCounters

SMALL, MAIN = 0, 1
_POSITION = struct.Struct(">Q")
_ITEM = struct.Struct(">QQ")  # a queue's value: sequence, cost, then the entry key
_PLACE = struct.Struct(">BQQQ")  # queue, position, sequence, cost
_GHOST = struct.Struct(">Q")  # a ghost's value: digest, then its cost; the index's: position, cost
_STATE = struct.Struct(">QQQQB")  # small bytes, main bytes, ghost bytes, last position, warm
SLOT_TRIES = 16  # sequences tried for a counter of its own
MOVES_MAX = 1 << 16  # main-queue moves in one eviction (a bound against a hit storm)


def digest(key: bytes) -> bytes:
    return hashlib.blake2b(key, digest_size=8).digest()


class S3FifoEvictor:
    def __init__(self) -> None:
        self.counters: HitCounters | None = None
        self.pending: dict[int, tuple[int | None, int]] = {}  # _Pending's, until committed

    def open(self, env: lmdb.Environment, directory: Path, capacity: int, health: Health) -> None:
        self.capacity = capacity
        self.small_capacity = int(SMALL_RATIO * capacity)
        self.main_capacity = capacity - self.small_capacity
        self.ghost_capacity = int(GHOST_RATIO * capacity)
        self.db_small = env.open_db(b"s3.small")
        self.db_main = env.open_db(b"s3.main")
        self.db_ghost = env.open_db(b"s3.ghost")
        self.db_ghost_keys = env.open_db(b"s3.ghostkeys")
        self.db_place = env.open_db(b"s3.place")
        self.db_state = env.open_db(b"s3.state")
        self.db_slots = env.open_db(b"s3.slots")
        self.health = health
        self.counters = HitCounters(directory, capacity, health)

    def next_sequence(self, txn: lmdb.Transaction, last: int) -> int:
        """The first sequence after ``last`` whose counter no stored entry has (a few tries;
        when every one is taken, as in a tier holding more entries than slots, it shares)."""
        assert self.counters is not None
        mask = self.counters.slots - 1
        for sequence in range(last + 1, last + 1 + SLOT_TRIES):
            if txn.get(_POSITION.pack(sequence & mask), db=self.db_slots) is None:
                return sequence
        return last + 1

    def hit(self, sequence: int) -> None:
        if self.counters is not None:
            self.counters.hit(sequence)

    def admit(self, txn: lmdb.Transaction, key: bytes, sequence: int, cost: int) -> Admission:
        try:
            queues = _Queues(self, txn)
            admission = queues.admit(key, sequence, cost)
            queues.save()
        except (struct.error, ValueError) as error:
            self._reset(txn, error)
            return Admission(True, [])
        return admission

    def kept_if_filled(self, txn: lmdb.Transaction, key: bytes, cost: int) -> bool:
        """``admit``'s rule for one large object, read only: refused when over half the tier
        (``LARGE_AT_ONCE``) unless held already or remembered by the ghost."""
        if cost > self.capacity:
            return False
        if cost <= LARGE_AT_ONCE * self.capacity or txn.get(key, db=self.db_place) is not None:
            return True
        return txn.get(digest(key), db=self.db_ghost_keys) is not None

    def remember(self, txn: lmdb.Transaction, key: bytes, cost: int) -> None:
        try:
            queues = _Queues(self, txn)
            queues.remember(digest(key), cost)
            queues.save()
        except (struct.error, ValueError) as error:
            self._reset(txn, error)

    def removed(self, txn: lmdb.Transaction, key: bytes) -> None:
        try:
            queues = _Queues(self, txn)
            if queues.unlink(key):
                queues.save()
        except (struct.error, ValueError) as error:
            self._reset(txn, error)

    def _reset(self, txn: lmdb.Transaction, error: BaseException) -> None:
        """A value of the queues that does not parse (the queues carry no checksum, unlike
        the entries): empty them, in this commit. Entries stored until then are no longer
        in any queue, so the commit's last step evicts them oldest first; new ones are
        queued again. Never an exception into the fill, never a wrong answer."""
        self.health.corrupted(f"eviction state, emptied: {error}")
        for db in (self.db_small, self.db_main, self.db_ghost, self.db_ghost_keys):
            txn.drop(db, delete=False)
        for db in (self.db_place, self.db_slots, self.db_state):
            txn.drop(db, delete=False)

    def committed(self) -> None:
        counters, pending = self.counters, self.pending
        self.pending = {}
        if counters is None:
            return
        for sequence, (read, count) in pending.items():
            counters.set(sequence, count if read is None else counters.get(sequence) + count - read)

    def aborted(self) -> None:
        self.pending = {}

    def close(self) -> None:
        if self.counters is not None:
            self.counters.close()


def own_counters(evictor: Evictor) -> HitCounters | None:
    """The counters ``evictor.hit`` raises, when it is S3-FIFO's own (not a subclass's): the
    shared tier's fast path raises them in place, one Python call less on every hit."""
    if type(evictor) is S3FifoEvictor:
        return evictor.counters
    return None


class _Pending:
    """The counters as a write transaction sees them: the shared map's, with what it has set
    (not yet applied: ``S3FifoEvictor.committed``)."""

    __slots__ = ("_changes", "_counters", "slots")

    def __init__(self, counters: HitCounters, changes: dict[int, tuple[int | None, int]]) -> None:
        self._counters = counters
        self._changes = changes  # sequence -> (the count read first, or None; the count set)
        self.slots = counters.slots

    def get(self, sequence: int) -> int:
        change = self._changes.get(sequence)
        if change is not None:
            return change[1]
        return self._counters.get(sequence)

    def set(self, sequence: int, count: int) -> None:
        """Set, as of the commit: a count read first (``get``) is applied as a change."""
        change = self._changes.get(sequence)
        read = change[0] if change is not None else None
        self._changes[sequence] = (read, max(0, min(count, MAX_COUNT)))

    def read(self, sequence: int) -> int:
        """``get``, remembering the count read, so that ``set`` after it is a change."""
        if sequence not in self._changes:
            count = self._counters.get(sequence)
            self._changes[sequence] = (count, count)
        return self._changes[sequence][1]


class _Queues:
    """The queues inside one write transaction: ``save`` writes their totals back."""

    def __init__(self, policy: S3FifoEvictor, txn: lmdb.Transaction) -> None:
        self.policy = policy
        self.txn = txn
        assert policy.counters is not None
        self.counters = _Pending(policy.counters, policy.pending)
        raw = txn.get(b"state", db=policy.db_state)
        state = _STATE.unpack(raw) if raw is not None else (0, 0, 0, 0, 0)  # struct.error
        self.small_used, self.main_used, self.ghost_used, self.position, warm = state
        self.warm = bool(warm)

    def save(self) -> None:
        state = (self.small_used, self.main_used, self.ghost_used, self.position, self.warm)
        self.txn.put(b"state", _STATE.pack(*state), db=self.policy.db_state)

    def admit(self, key: bytes, sequence: int, cost: int) -> Admission:
        policy = self.policy
        place = self.txn.get(key, db=policy.db_place)
        if place is not None:
            return self._refill(key, _PLACE.unpack(place), sequence, cost)
        key_digest = digest(key)
        remembered = self._forget(key_digest)
        if cost > policy.capacity:
            return Admission(False, [])
        if not remembered and cost >= policy.small_capacity:
            if cost > LARGE_AT_ONCE * policy.capacity:  # kept at its next fill, if remembered
                self.remember(key_digest, cost)
                return Admission(False, [])
            remembered = True  # large: straight into the main queue
        victims: list[tuple[bytes, int]] = []
        while self.small_used + self.main_used + cost > policy.capacity:
            if not self._evict_one(victims):
                break
        self.counters.set(sequence, 0)
        self._claim(sequence)
        # Until the first eviction, keys beyond the small queue's share go to the main queue.
        if remembered or (not self.warm and self.small_used >= policy.small_capacity):
            self._link(MAIN, key, sequence, cost)
        else:
            self._link(SMALL, key, sequence, cost)
        return Admission(True, victims)

    def _refill(
        self, key: bytes, place: tuple[int, int, int, int], sequence: int, cost: int
    ) -> Admission:
        """A key held already, stored again: a hit, and its new size in place (as the pure
        policy's ``admit`` of a held key)."""
        queue, position, old_sequence, old_cost = place
        hits = self.counters.read(old_sequence)
        if cost > self.policy.capacity:
            self.unlink(key)
            return Admission(False, [])
        item = _ITEM.pack(sequence, cost) + key
        self.txn.put(_POSITION.pack(position), item, db=self._db(queue))
        self.txn.put(key, _PLACE.pack(queue, position, sequence, cost), db=self.policy.db_place)
        self._add(queue, cost - old_cost)
        self._release(old_sequence)
        self._claim(sequence)
        self.counters.set(sequence, hits + 1)
        victims: list[tuple[bytes, int]] = []
        while self.small_used + self.main_used > self.policy.capacity:
            if not self._evict_one(victims):
                break
        kept = all(victim != key for victim, _ in victims)
        return Admission(kept, [(k, s) for k, s in victims if k != key])

    def unlink(self, key: bytes) -> bool:
        """Take ``key`` out of its queue (False when it is in none)."""
        txn, policy = self.txn, self.policy
        place = txn.get(key, db=policy.db_place)
        if place is None:
            return False
        queue, position, sequence, cost = _PLACE.unpack(place)
        txn.delete(_POSITION.pack(position), db=self._db(queue))
        txn.delete(key, db=policy.db_place)
        self._release(sequence)
        self._add(queue, -cost)
        return True

    def _claim(self, sequence: int) -> None:
        """The entry stored under ``sequence`` holds its counter's slot."""
        self.txn.put(self._slot(sequence), _POSITION.pack(sequence), db=self.policy.db_slots)

    def _release(self, sequence: int) -> None:
        slot, db = self._slot(sequence), self.policy.db_slots
        held = self.txn.get(slot, db=db)
        if held is not None and bytes(held) == _POSITION.pack(sequence):
            self.txn.delete(slot, db=db)

    def _slot(self, sequence: int) -> bytes:
        return _POSITION.pack(sequence & (self.counters.slots - 1))

    # -- the queues ------------------------------------------------------------------------------

    def _db(self, queue: int) -> lmdb._Database:
        return self.policy.db_small if queue == SMALL else self.policy.db_main

    def _add(self, queue: int, cost: int) -> None:
        if queue == SMALL:
            self.small_used = max(0, self.small_used + cost)
        else:
            self.main_used = max(0, self.main_used + cost)

    def _link(self, queue: int, key: bytes, sequence: int, cost: int) -> None:
        """Put ``key`` at the young end of ``queue``."""
        self.position += 1
        position = self.position
        self.txn.put(_POSITION.pack(position), _ITEM.pack(sequence, cost) + key, db=self._db(queue))
        self.txn.put(key, _PLACE.pack(queue, position, sequence, cost), db=self.policy.db_place)
        self._add(queue, cost)

    def _pop(self, queue: int) -> tuple[bytes, int, int] | None:
        """Take the oldest key out of ``queue``: key, sequence, cost (None when empty). Its
        place is the caller's to relink or delete."""
        cursor = self.txn.cursor(self._db(queue))
        if not cursor.first():
            return None
        value = cursor.value()
        cursor.delete()
        sequence, cost = _ITEM.unpack_from(value)
        self._add(queue, -cost)
        return bytes(value[_ITEM.size :]), sequence, cost

    def _evict_one(self, victims: list[tuple[bytes, int]]) -> bool:
        """Evict one key: False when there was none to evict (both queues empty)."""
        self.warm = True
        if self.main_used > self.policy.main_capacity or self.small_used == 0:
            return self._evict_main(victims) or self._evict_small(victims)
        return self._evict_small(victims) or self._evict_main(victims)

    def _evict_small(self, victims: list[tuple[bytes, int]]) -> bool:
        """Move the small queue's oldest keys hit enough to the main queue (their counters
        back at 0), until one is evicted (into the ghost): False when none was."""
        while (oldest := self._pop(SMALL)) is not None:
            key, sequence, cost = oldest
            if self.counters.read(sequence) >= MOVE_TO_MAIN:
                self.counters.set(sequence, 0)
                self._link(MAIN, key, sequence, cost)
                continue
            self.txn.delete(key, db=self.policy.db_place)
            self._release(sequence)
            victims.append((key, sequence))
            self.remember(digest(key), cost)
            return True
        return False

    def _evict_main(self, victims: list[tuple[bytes, int]]) -> bool:
        """Give the main queue's oldest keys that were hit another round, each with one hit
        less, until one that was not is evicted: False when the queue was empty."""
        moves = 0
        while (oldest := self._pop(MAIN)) is not None:
            key, sequence, cost = oldest
            hits = self.counters.read(sequence)
            if hits >= 1 and moves < MOVES_MAX:
                moves += 1
                self.counters.set(sequence, min(hits, MAIN_MAX_FREQ) - 1)
                self._link(MAIN, key, sequence, cost)
                continue
            self.txn.delete(key, db=self.policy.db_place)
            self._release(sequence)
            victims.append((key, sequence))
            return True
        return False

    # -- the ghost -------------------------------------------------------------------------------

    def remember(self, key_digest: bytes, cost: int) -> None:
        policy, txn = self.policy, self.txn
        if cost > policy.ghost_capacity:
            return
        self._forget(key_digest)
        cursor = txn.cursor(policy.db_ghost)
        while self.ghost_used + cost > policy.ghost_capacity and cursor.first():
            value = cursor.value()
            old_digest, old_cost = bytes(value[:8]), _GHOST.unpack_from(value, 8)[0]
            indexed = txn.get(old_digest, db=policy.db_ghost_keys)
            if indexed is not None and bytes(indexed[:8]) == bytes(cursor.key()):
                txn.delete(old_digest, db=policy.db_ghost_keys)
            cursor.delete()
            self.ghost_used = max(0, self.ghost_used - old_cost)
        self.position += 1
        position = _POSITION.pack(self.position)
        txn.put(position, key_digest + _GHOST.pack(cost), db=policy.db_ghost)
        txn.put(key_digest, position + _GHOST.pack(cost), db=policy.db_ghost_keys)
        self.ghost_used += cost

    def _forget(self, key_digest: bytes) -> bool:
        """Take the key out of the ghost: whether it was there."""
        policy, txn = self.policy, self.txn
        indexed = txn.get(key_digest, db=policy.db_ghost_keys)
        if indexed is None:
            return False
        txn.delete(key_digest, db=policy.db_ghost_keys)
        txn.delete(bytes(indexed[:8]), db=policy.db_ghost)
        self.ghost_used = max(0, self.ghost_used - _GHOST.unpack_from(indexed, 8)[0])
        return True
