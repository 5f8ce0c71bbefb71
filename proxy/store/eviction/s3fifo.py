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
eviction runs before the new key is linked. Replayed step by step against it on random
traces, every request is a hit or a miss in both (tests/store/test_eviction.py).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterator
from itertools import chain
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)

SMALL_RATIO = 0.1
GHOST_RATIO = 0.9
MOVE_TO_MAIN = 2
MAIN_MAX_FREQ = 3


class _Node:
    __slots__ = ("freq", "main", "size")

    def __init__(self, size: int, main: bool) -> None:
        self.size = size
        self.freq = 0
        self.main = main


class S3FIFO(Generic[K]):
    __slots__ = (
        "_capacity",
        "_ghost",
        "_ghost_capacity",
        "_ghost_used",
        "_main",
        "_main_capacity",
        "_main_used",
        "_move_to_main",
        "_nodes",
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
    ) -> None:
        if capacity < 0:
            raise ValueError(f"capacity must be >= 0 bytes, not {capacity}")
        self._capacity = capacity
        self._small_capacity = int(small_ratio * capacity)
        self._main_capacity = capacity - self._small_capacity
        self._ghost_capacity = int(ghost_ratio * capacity)
        self._move_to_main = move_to_main
        self._nodes: dict[K, _Node] = {}
        # Both queues in FIFO order, oldest first; the values are the nodes in _nodes.
        self._small: OrderedDict[K, _Node] = OrderedDict()
        self._main: OrderedDict[K, _Node] = OrderedDict()
        self._ghost: OrderedDict[K, int] = OrderedDict()  # key -> its size when evicted
        self._small_used = self._main_used = self._ghost_used = 0
        self._warm = False  # whether anything was ever evicted

    def hit(self, key: K) -> None:
        node = self._nodes.get(key)
        if node is not None:
            node.freq += 1

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def used(self) -> int:
        return self._small_used + self._main_used

    def __len__(self) -> int:
        return len(self._nodes)

    def __contains__(self, key: object) -> bool:
        return key in self._nodes

    def __iter__(self) -> Iterator[K]:
        """The keys of the small queue, then of the main one, oldest first in each."""
        return chain(self._small, self._main)

    def admit(self, key: K, size: int) -> list[K]:
        node = self._nodes.get(key)
        if node is not None:
            node.freq += 1
            return self.resize(key, size)
        remembered = self._ghost.pop(key, None)
        if remembered is not None:
            self._ghost_used -= remembered
        if size > self._capacity or (remembered is None and size >= self._small_capacity):
            return [key]
        evicted: list[K] = []
        while self.used + size > self._capacity and self._nodes:
            self._evict_one(evicted)
        # Until the first eviction, keys beyond the small queue's share go to the main queue:
        # a cold cache fills without sending its first keys through the small queue.
        main = remembered is not None or (
            not self._warm and self._small_used >= self._small_capacity
        )
        node = self._nodes[key] = _Node(size, main=main)
        if node.main:
            self._main[key] = node
            self._main_used += size
        else:
            self._small[key] = node
            self._small_used += size
        return evicted

    def resize(self, key: K, size: int) -> list[K]:
        node = self._nodes.get(key)
        if node is None:
            return []
        if size > self._capacity:
            self.remove(key)
            return [key]
        if node.main:
            self._main_used += size - node.size
        else:
            self._small_used += size - node.size
        node.size = size
        evicted: list[K] = []
        while self.used > self._capacity and self._nodes:
            self._evict_one(evicted)
        return evicted

    def remove(self, key: K) -> bool:
        node = self._nodes.pop(key, None)
        if node is None:
            return False
        if node.main:
            del self._main[key]
            self._main_used -= node.size
        else:
            del self._small[key]
            self._small_used -= node.size
        return True

    def _evict_one(self, evicted: list[K]) -> None:
        self._warm = True
        if self._main_used > self._main_capacity or not self._small:
            self._evict_main(evicted)
        else:
            self._evict_small(evicted)

    def _evict_small(self, evicted: list[K]) -> None:
        """Move the small queue's oldest keys that were hit enough to the main queue, until
        one is evicted (into the ghost) or the small queue is empty."""
        small, main = self._small, self._main
        while small:
            key, node = small.popitem(last=False)
            self._small_used -= node.size
            if node.freq >= self._move_to_main:
                node.main, node.freq = True, 0
                main[key] = node
                self._main_used += node.size
                continue
            del self._nodes[key]
            evicted.append(key)
            self._remember(key, node.size)
            return

    def _evict_main(self, evicted: list[K]) -> None:
        """Give the main queue's oldest keys that were hit another round, each with one hit
        less, until one that was not is evicted."""
        main = self._main
        while main:
            key = next(iter(main))
            node = main[key]
            if node.freq >= 1:
                main.move_to_end(key)
                node.freq = min(node.freq, MAIN_MAX_FREQ) - 1
                continue
            del main[key]
            del self._nodes[key]
            self._main_used -= node.size
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
