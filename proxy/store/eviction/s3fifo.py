"""S3-FIFO (Yang et al., SOSP'23): a small FIFO, a main FIFO and a ghost FIFO of keys.

- A new key goes into the small queue (a tenth of the capacity), unless the ghost queue
  remembers it (evicted from the small queue not long ago): then straight into the main one.
- A hit adds one to the key's counter: one attribute store, nothing moves.
- Evicting from the small queue: its oldest key moves to the main queue (its counter back
  at 0) when it was hit at least ``move_to_main`` times since it came in, else it is evicted
  and remembered in the ghost queue (a FIFO of keys, bounded by the bytes they stood for).
- Evicting from the main queue: its oldest key goes back in at the young end with its
  counter lowered by one (counters count to 3 at most there), or is evicted when it was not
  hit since: CLOCK with a 2-bit counter.
- The main queue is evicted from when it is over its share or the small queue is empty.
  Most one-hit wonders thus leave through the small queue without touching the main one,
  which is why it suits CDN traces.

This follows libCacheSim's S3FIFO (the reference the benchmark checks it against) and its
defaults: small queue 10% of the capacity, ghost 90%, moved to main at 2 hits. As there, a
key as large as the small queue or larger is not admitted unless the ghost remembers it;
until the first eviction, new keys that find the small queue full go to the main one; and
eviction runs before the new key is linked (``remember_large`` changes the first rule: the
shared tier's, proxy/store/shared/s3fifo.py). Replayed step by step against it on random
traces, every request is a hit or a miss in both (tests/store/test_eviction.py).

Nothing is kept in an object per key: the queues are OrderedDicts of key -> size and the
counters a dict of key -> int, containers the garbage collector does not walk key by key
once the service has frozen its start-up heap (decision 0011); a node object per key cost
a 40 ms pause per full collection at 200,000 keys.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterator
from itertools import chain
from typing import Generic, TypeVar

from proxy.store.eviction.bounded import Bounded

K = TypeVar("K", bound=Hashable)

SMALL_RATIO = 0.1
GHOST_RATIO = 0.9
MOVE_TO_MAIN = 2
MAIN_MAX_FREQ = 3
# The shared tier's rule for a key as large as the small queue: admitted at its first fill
# straight into the main queue up to this share of the capacity (a CDN caches a download the
# first time), remembered and admitted at its next fill above it.
LARGE_AT_ONCE = 0.5


class S3FIFO(Bounded, Generic[K]):
    __slots__ = (
        "_freq",
        "_ghost",
        "_ghost_capacity",
        "_ghost_used",
        "_main",
        "_main_capacity",
        "_main_used",
        "_move_to_main",
        "_remember_large",
        "_small",
        "_small_capacity",
        "_small_used",
        "_warm",
    )

    def __init__(
        self,
        capacity: int,
        *,
        small_ratio: float = SMALL_RATIO,
        ghost_ratio: float = GHOST_RATIO,
        move_to_main: int = MOVE_TO_MAIN,
        remember_large: bool = False,
    ) -> None:
        super().__init__(capacity)
        self._small_capacity = int(small_ratio * capacity)
        self._main_capacity = capacity - self._small_capacity
        self._ghost_capacity = int(ghost_ratio * capacity)
        self._move_to_main = move_to_main
        # The shared tier's rule (proxy/store/shared/s3fifo.py): a key too large for the small
        # queue goes straight to the main queue, up to LARGE_AT_ONCE of the capacity; a larger
        # one is remembered in the ghost when refused, so its next admission goes to main.
        self._remember_large = remember_large
        self._freq: dict[K, int] = {}  # every key held -> its hits counted
        # Both queues in FIFO order, oldest first: key -> size.
        self._small: OrderedDict[K, int] = OrderedDict()
        self._main: OrderedDict[K, int] = OrderedDict()
        self._ghost: OrderedDict[K, int] = OrderedDict()  # key -> its size when evicted
        self._small_used = self._main_used = self._ghost_used = 0
        self._warm = False  # whether anything was ever evicted

    def hit(self, key: K) -> None:
        # try, not a test for membership first: one lookup fewer when held (the usual case)
        try:  # noqa: SIM105
            self._freq[key] += 1
        except KeyError:  # not held: nothing to do
            pass

    @property
    def used(self) -> int:
        return self._small_used + self._main_used

    def __len__(self) -> int:
        return len(self._freq)

    def __contains__(self, key: object) -> bool:
        return key in self._freq

    def __iter__(self) -> Iterator[K]:
        """The keys of the small queue, then of the main one, oldest first in each."""
        return chain(self._small, self._main)

    def admit(self, key: K, size: int) -> list[K]:
        if key in self._freq:
            self._freq[key] += 1
            return self.resize(key, size)
        remembered = self._ghost.pop(key, None)
        if remembered is not None:
            self._ghost_used -= remembered
        if size > self._capacity:
            return [key]
        if remembered is None and size >= self._small_capacity:
            if not self._remember_large:
                return [key]
            if size > LARGE_AT_ONCE * self._capacity:
                self._remember(key, size)
                return [key]
            remembered = size  # the shared tier's rule: straight into the main queue
        evicted: list[K] = []
        while self.used + size > self._capacity and self._freq:
            self._evict_one(evicted)
        self._freq[key] = 0
        # Until the first eviction, keys beyond the small queue's share go to the main queue:
        # a cold cache fills without sending its first keys through the small queue.
        if remembered is not None or (not self._warm and self._small_used >= self._small_capacity):
            self._main[key] = size
            self._main_used += size
        else:
            self._small[key] = size
            self._small_used += size
        return evicted

    def resize(self, key: K, size: int) -> list[K]:
        if key not in self._freq:
            return []
        if size > self._capacity:
            self.remove(key)
            return [key]
        if key in self._small:
            self._small_used += size - self._small[key]
            self._small[key] = size
        else:
            self._main_used += size - self._main[key]
            self._main[key] = size
        evicted: list[K] = []
        while self.used > self._capacity and self._freq:
            self._evict_one(evicted)
        return evicted

    def remove(self, key: K) -> bool:
        if self._freq.pop(key, None) is None:
            return False
        size = self._small.pop(key, None)
        if size is not None:
            self._small_used -= size
        else:
            self._main_used -= self._main.pop(key)
        return True

    def _evict_one(self, evicted: list[K]) -> None:
        self._warm = True
        if self._main_used > self._main_capacity or not self._small:
            self._evict_main(evicted)
        else:
            self._evict_small(evicted)

    def _evict_small(self, evicted: list[K]) -> None:
        """Move the small queue's oldest keys that were hit enough to the main queue (their
        counters back at 0), until one is evicted (into the ghost) or the small queue is
        empty."""
        small, main, freq = self._small, self._main, self._freq
        while small:
            key, size = small.popitem(last=False)
            self._small_used -= size
            if freq[key] >= self._move_to_main:
                main[key] = size
                freq[key] = 0
                self._main_used += size
                continue
            del freq[key]
            evicted.append(key)
            self._remember(key, size)
            return

    def _evict_main(self, evicted: list[K]) -> None:
        """Give the main queue's oldest keys that were hit another round, each with one hit
        less, until one that was not is evicted."""
        main, freq = self._main, self._freq
        while main:
            key = next(iter(main))
            hits = freq[key]
            if hits >= 1:
                main.move_to_end(key)
                freq[key] = min(hits, MAIN_MAX_FREQ) - 1
                continue
            self._main_used -= main.pop(key)
            del freq[key]
            evicted.append(key)
            return

    def _remember(self, key: K, size: int) -> None:
        if size > self._ghost_capacity:
            return
        ghost = self._ghost
        while self._ghost_used + size > self._ghost_capacity and ghost:
            self._ghost_used -= ghost.popitem(last=False)[1]
        ghost[key] = size
        self._ghost_used += size
