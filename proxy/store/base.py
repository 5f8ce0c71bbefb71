"""The store interface, and the purge interface the API talks to.

The proxy logic (``proxy.edge``) and the clear-cache API (``proxy.api``) only see these two
protocols. The in-memory store implements both today; a Valkey-backed store for a fleet can
implement them later without touching either caller.

Clearing is by generation: every key carries its domain's generation, and a clear moves the
domain to a new one. Entries of the old generation can never be looked up again, so the clear
is O(1) however many entries the domain had, and the old entries are reclaimed later, in
small slices, by ``reclaim``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from proxy.core.entry import CacheKey, StoredResponse


@dataclass(frozen=True, slots=True)
class ClearResult:
    domain: str
    entries_dropped: int  # entries that can no longer be served
    generation: int  # the domain's generation after the clear


@dataclass(frozen=True, slots=True)
class DomainStats:
    entries: int
    bytes: int


@dataclass(frozen=True, slots=True)
class StoreStats:
    entries: int  # live and not yet reclaimed
    bytes: int
    max_bytes: int
    evictions: int
    pending_reclaim: int  # entries of cleared generations not yet reclaimed


class Store(Protocol):
    async def generation(self, domain: str) -> int:
        """The domain's current generation; part of every key built for it."""
        ...

    async def get(self, key: CacheKey) -> Sequence[StoredResponse]:
        """The stored variants for the key, most recent first; empty when there are none."""
        ...

    async def put(self, key: CacheKey, response: StoredResponse) -> bool:
        """Store a variant. False (and nothing stored) if the key's generation is no longer
        current or the response is larger than the object limit."""
        ...

    async def invalidate(self, domain: str, target: str) -> int:
        """Drop every variant stored for one URL of the domain (RFC 9111 §4.4)."""
        ...

    async def clear_domain(self, domain: str) -> ClearResult:
        """Make everything stored for the domain unservable, at once."""
        ...

    async def domain_stats(self, domain: str) -> DomainStats: ...

    async def stats(self) -> StoreStats: ...


@runtime_checkable
class LocalStore(Protocol):
    """A store in this process, which can answer a lookup without awaiting. The edge uses it
    for fresh hits, the one path where a coroutine per request is measurable."""

    def peek(self, domain: str, target: str) -> StoredResponse | None:
        """Like ``get`` with the domain's current generation, synchronously, for the common
        case only: the stored response when it is the key's one variant, else None."""
        ...


class Purger(Protocol):
    """What the clear-cache API calls. Returns only once the clear is in effect."""

    async def clear_domain(self, domain: str) -> ClearResult: ...


class LocalPurger:
    """Purges this process's store. A fleet purger (Valkey pub/sub) can replace it."""

    def __init__(self, store: Store) -> None:
        self._store = store

    async def clear_domain(self, domain: str) -> ClearResult:
        return await self._store.clear_domain(domain)
