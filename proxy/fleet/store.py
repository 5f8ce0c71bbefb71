"""The store of a fleet member: the process's own store behind the member's fence (0014).

While the member's lease deadline has not passed, every call goes to the process's local
store (any ``Store``: the memory store, or tiers behind it), whose generations the member
keeps in step with the fleet. Past it, the member may have missed a clear: ``peek`` finds
nothing, ``lookup`` finds nothing and says ``bypass="fenced"`` (the edge forwards, and says
why in Cache-Status), and ``put`` stores nothing. The check is one monotonic clock read and
a comparison, made per request: a process woken from SIGSTOP past its deadline is fenced on
its very first request, with no timer that could run late.

A clear through this store's ``clear_now`` or ``clear_domain`` clears the local store only; a
fleet-wide clear goes through ``FleetPurger``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from proxy.core.cache.entry import CacheKey, StoredResponse
from proxy.core.purge.purges import Purge, PurgeResult
from proxy.store.base import ClearResult, DomainStats, Lookup, Store, StoreStats

FENCED = "fenced"


class Fence(Protocol):
    """What the store reads from the member: its lease deadline, and the monotonic clock that
    deadline is measured by."""

    @property
    def deadline(self) -> float: ...

    @property
    def clock(self) -> Callable[[], float]: ...


class FleetStore:
    """Implements ``proxy.store.base.Store``."""

    def __init__(self, local: Store, fence: Fence) -> None:
        self.local = local
        self._fence = fence
        # The member's own clock, read once: a clock of the store's could disagree with the
        # one the deadline was set by.
        self._clock = fence.clock

    @property
    def fenced(self) -> bool:
        return self._clock() >= self._fence.deadline

    def peek(self, domain: str, target: str) -> StoredResponse | None:
        # The hit path: one clock read and one comparison before the local store's peek.
        if self._clock() >= self._fence.deadline:
            return None
        return self.local.peek(domain, target)

    async def lookup(self, domain: str, target: str) -> Lookup:
        found = await self.local.lookup(domain, target)
        if self._clock() >= self._fence.deadline:
            return Lookup(found.key, (), bypass=FENCED)
        return found

    async def put(self, key: CacheKey, response: StoredResponse) -> bool:
        if self._clock() >= self._fence.deadline:
            return False
        return await self.local.put(key, response)

    async def invalidate(self, domain: str, target: str) -> int:
        return await self.local.invalidate(domain, target)

    def clear_now(self, domain: str) -> ClearResult:
        return self.local.clear_now(domain)

    def purge_now(self, domain: str, purge: Purge) -> PurgeResult:
        # This member's store only, as clear_now (a fleet-wide purge: decision 0024).
        return self.local.purge_now(domain, purge)

    async def clear_domain(self, domain: str) -> ClearResult:
        return await self.local.clear_domain(domain)

    async def purge(self, domain: str, purge: Purge) -> PurgeResult:
        return await self.local.purge(domain, purge)

    async def domain_stats(self, domain: str) -> DomainStats:
        return await self.local.domain_stats(domain)

    async def stats(self) -> StoreStats:
        return await self.local.stats()
