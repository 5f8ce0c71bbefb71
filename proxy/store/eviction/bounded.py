"""What the eviction policies share: a capacity in bytes, checked once, and the bytes held.

Slotted base classes, so that a policy still keeps no ``__dict__`` and its hit path reads
the same attributes it did before.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class Bounded:
    """A policy over ``capacity`` bytes (0 or more)."""

    __slots__ = ("_capacity",)

    def __init__(self, capacity: int) -> None:
        if capacity < 0:
            raise ValueError(f"capacity must be >= 0 bytes, not {capacity}")
        self._capacity = capacity

    @property
    def capacity(self) -> int:
        return self._capacity


class Tallied(Bounded, Generic[K]):
    """A bounded policy that keeps one running total of the bytes it holds, and one size per
    key: resizing is the same bookkeeping whatever the queue."""

    __slots__ = ("_used",)

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self._used = 0

    @property
    def used(self) -> int:
        return self._used

    def resize(self, key: K, size: int) -> list[K]:
        old = self._size(key)
        if old is None:
            return []
        if size > self._capacity:
            self.remove(key)
            return [key]
        self._set_size(key, size)
        self._used += size - old
        return self._evict(self._capacity)

    @abstractmethod
    def _size(self, key: K) -> int | None:
        """The size held for ``key``, or None when it is not held."""

    @abstractmethod
    def _set_size(self, key: K, size: int) -> None:
        """Set a held key's size (the tally is the caller's)."""

    @abstractmethod
    def remove(self, key: K) -> bool: ...

    @abstractmethod
    def _evict(self, limit: int) -> list[K]:
        """Evict keys until at most ``limit`` bytes are held: the keys evicted, in order."""
