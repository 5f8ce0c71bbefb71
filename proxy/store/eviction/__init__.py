"""Eviction policies: which keys a byte-bounded cache drops to make room.

Pure, synchronous bookkeeping with no I/O and no clock: a store owns the responses and tells
a policy what happened to their keys; the policy answers which keys to drop. Decision 0029
has the options, the measured miss ratios and hit costs, and the choice.

The interface (``EvictionPolicy``), for a store that keeps ``dict[key, response]``:

- ``admit(key, size)`` when a response is stored: the keys to drop from the store, in
  eviction order. A key that cannot be held at all (larger than the policy takes) comes back
  itself, and nothing else is evicted for it. Admitting a key that is held already sets its
  new size and counts as a hit.
- ``hit(key)`` on every hit: O(1), a bit (SIEVE) or a counter (S3-FIFO) set in place, or
  the key moved to the young end (LRU). A key not held is ignored. (The memory store sets
  SIEVE's bit itself, through ``Sieve.hit_bits``: no call on its hit path.)
- ``remove(key)`` when the store drops a key by itself (a purge, a reclaimed clear): O(1).
  A key not held (evicted or removed already) is ignored: it returns False.
- ``resize(key, size)`` when a held key's size changes without a request (a soft purge's
  expired copy, a variant dropped): the keys to drop, as ``admit``.
- ``len(policy)``, ``policy.used`` (bytes held), ``policy.capacity``, ``key in policy``.

Keys the store knows to be dead (a cleared generation, not yet reclaimed) stay in the policy
until they are evicted or removed, and count against the capacity like any other, as in the
store itself.

No policy keeps an object per key (the garbage collector would walk each one on every full
collection: decision 0011); each keeps its keys in a few containers.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from typing import Protocol, TypeVar

from proxy.store.eviction.lru import LRU
from proxy.store.eviction.s3fifo import S3FIFO
from proxy.store.eviction.sieve import Sieve

__all__ = ["LRU", "POLICIES", "S3FIFO", "EvictionPolicy", "Sieve", "make_policy"]

K = TypeVar("K", bound=Hashable)


class EvictionPolicy(Protocol[K]):
    @property
    def capacity(self) -> int: ...

    @property
    def used(self) -> int: ...

    def admit(self, key: K, size: int) -> list[K]: ...

    def hit(self, key: K) -> None: ...

    def remove(self, key: K) -> bool: ...

    def resize(self, key: K, size: int) -> list[K]: ...

    def __len__(self) -> int: ...

    def __contains__(self, key: object) -> bool: ...

    def __iter__(self) -> Iterator[K]: ...


# name -> constructor taking the capacity in bytes
POLICIES: dict[str, Callable[[int], EvictionPolicy[Hashable]]] = {
    "lru": LRU,
    "sieve": Sieve,
    "s3fifo": S3FIFO,
}


def make_policy(name: str, capacity: int) -> EvictionPolicy[Hashable]:
    """The policy called ``name`` (a key of POLICIES) over ``capacity`` bytes."""
    try:
        factory = POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown eviction policy {name!r}: one of {sorted(POLICIES)}") from None
    return factory(capacity)
