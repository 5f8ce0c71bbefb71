"""SIEVE (Zhang et al., NSDI'24): a FIFO queue, a visited bit per key, and a hand.

- A new key goes in at the young end, not visited.
- A hit sets the key's visited bit: one attribute store, nothing moves.
- To evict, the hand walks from where it stopped towards the young end (starting at the old
  end, and wrapping back to it), clearing visited bits, and evicts the first key whose bit
  was clear; it stops on the next younger key. Keys that survive stay where they are, so new
  keys and old survivors are kept apart (unlike CLOCK, which inserts at the hand).

This follows libCacheSim's Sieve (the reference the benchmark checks it against): eviction
runs before the new key is linked, so the newcomer is never its own victim.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class _Node(Generic[K]):
    __slots__ = ("key", "newer", "older", "size", "visited")

    def __init__(self, key: K, size: int) -> None:
        self.key = key
        self.size = size
        self.visited = False
        self.newer: _Node[K] | None = None
        self.older: _Node[K] | None = None


class Sieve(Generic[K]):
    __slots__ = ("_capacity", "_hand", "_nodes", "_oldest", "_used", "_youngest")

    def __init__(self, capacity: int) -> None:
        if capacity < 0:
            raise ValueError(f"capacity must be >= 0 bytes, not {capacity}")
        self._capacity = capacity
        self._nodes: dict[K, _Node[K]] = {}
        self._youngest: _Node[K] | None = None
        self._oldest: _Node[K] | None = None
        self._hand: _Node[K] | None = None  # None: start at the oldest
        self._used = 0

    def hit(self, key: K) -> None:
        node = self._nodes.get(key)
        if node is not None:
            node.visited = True

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def used(self) -> int:
        return self._used

    def __len__(self) -> int:
        return len(self._nodes)

    def __contains__(self, key: object) -> bool:
        return key in self._nodes

    def __iter__(self) -> Iterator[K]:
        """The keys in queue order, oldest first (not eviction order: the hand decides)."""
        node = self._oldest
        while node is not None:
            yield node.key
            node = node.newer

    def admit(self, key: K, size: int) -> list[K]:
        node = self._nodes.get(key)
        if node is not None:
            node.visited = True
            return self.resize(key, size)
        if size > self._capacity:
            return [key]
        evicted = self._evict(self._capacity - size)
        node = self._nodes[key] = _Node(key, size)
        node.older = self._youngest
        if self._youngest is not None:
            self._youngest.newer = node
        else:
            self._oldest = node
        self._youngest = node
        self._used += size
        return evicted

    def resize(self, key: K, size: int) -> list[K]:
        node = self._nodes.get(key)
        if node is None:
            return []
        if size > self._capacity:
            self.remove(key)
            return [key]
        self._used += size - node.size
        node.size = size
        return self._evict(self._capacity)

    def remove(self, key: K) -> bool:
        node = self._nodes.pop(key, None)
        if node is None:
            return False
        self._unlink(node)
        return True

    def _unlink(self, node: _Node[K]) -> None:
        if node is self._hand:
            self._hand = node.newer
        if node.newer is not None:
            node.newer.older = node.older
        else:
            self._youngest = node.older
        if node.older is not None:
            node.older.newer = node.newer
        else:
            self._oldest = node.newer
        node.newer = node.older = None
        self._used -= node.size

    def _evict(self, limit: int) -> list[K]:
        """Evict until at most ``limit`` bytes are held."""
        evicted: list[K] = []
        while self._used > limit and self._oldest is not None:
            node = self._hand or self._oldest
            while node.visited:
                node.visited = False
                node = node.newer or self._oldest
            self._hand = node.newer
            del self._nodes[node.key]
            self._unlink(node)
            evicted.append(node.key)
        return evicted
