"""Least recently used: every hit moves its key to the young end of an OrderedDict.

What the memory tier does today (``OrderedDict.move_to_end`` on every hit), kept as the
baseline the FIFO-based policies are measured against (decision 0029).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterator
from typing import TypeVar

from proxy.store.eviction.bounded import Tallied

K = TypeVar("K", bound=Hashable)


class LRU(Tallied[K]):
    __slots__ = ("_sizes",)

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self._sizes: OrderedDict[K, int] = OrderedDict()  # least recently used first

    def hit(self, key: K) -> None:
        # try, not contextlib.suppress or a test for membership: the cheapest when held
        try:  # noqa: SIM105
            self._sizes.move_to_end(key)
        except KeyError:  # not held: nothing to do
            pass

    def __len__(self) -> int:
        return len(self._sizes)

    def __contains__(self, key: object) -> bool:
        return key in self._sizes

    def __iter__(self) -> Iterator[K]:
        """The keys, next to be evicted first."""
        return iter(self._sizes)

    def admit(self, key: K, size: int) -> list[K]:
        if key in self._sizes:
            self._sizes.move_to_end(key)
            return self.resize(key, size)
        if size > self._capacity:
            return [key]
        evicted = self._evict(self._capacity - size)
        self._sizes[key] = size
        self._used += size
        return evicted

    def _size(self, key: K) -> int | None:
        return self._sizes.get(key)

    def _set_size(self, key: K, size: int) -> None:
        self._sizes[key] = size

    def remove(self, key: K) -> bool:
        size = self._sizes.pop(key, None)
        if size is None:
            return False
        self._used -= size
        return True

    def _evict(self, limit: int) -> list[K]:
        """Evict least recently used keys until at most ``limit`` bytes are held."""
        evicted: list[K] = []
        sizes = self._sizes
        while self._used > limit and sizes:
            key, size = sizes.popitem(last=False)
            self._used -= size
            evicted.append(key)
        return evicted
