"""What the eviction policies share: a capacity in bytes, checked once, and the bytes held.

Slotted base classes, so that a policy still keeps no ``__dict__`` and its hit path reads
the same attributes it did before.
"""

from __future__ import annotations


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


class Tallied(Bounded):
    """A bounded policy that keeps one running total of the bytes it holds."""

    __slots__ = ("_used",)

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self._used = 0

    @property
    def used(self) -> int:
        return self._used
