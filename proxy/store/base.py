"""The store interface, and the purge interface the API talks to.

The proxy logic (``proxy.edge``), the clear-cache API (``proxy.api``) and a fleet member
(``proxy.fleet``) only see these protocols. The in-memory store (``proxy.store.memory``) and
a fleet member's fenced store (``proxy.fleet.store``) implement ``Store``; a store of two tiers
(memory in front of a shared tier) implements it too and plugs in wherever they do.

Clearing is by generation: every key carries its domain's generation, and a clear moves the
domain to a new one. Entries of the old generation can never be looked up again, so the clear
is O(1) however many entries the domain had, and the old entries are reclaimed later, in
small slices, by ``reclaim``.

Deciding and doing are apart. What makes an entry unservable (a domain's new generation, a
purge's ban, tags or dropped URLs) is decided in the process, in one step that never
suspends: ``clear_now`` and ``purge_now`` are plain methods, and a store whose tiers do I/O
does what is slow behind them, later (reclaim, write behind). A fleet member relies on it: it
applies a batch of clears and purges read from Valkey with no await between them, so no
lookup ever sees half of a batch (proxy/fleet/member.py). The ``async`` methods are those that
may wait: a lookup or fill that reads a slower tier, a dry run that walks the keys in slices,
and ``clear_domain`` and ``purge``, which mean ``clear_now`` and ``purge_now`` for callers
that await. mypy --strict holds every store passed as a ``Store`` to this (a coroutine where
the protocol declares a plain method does not type-check), and tests/store/test_protocol.py
holds every store class in ``proxy`` to it at run time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from proxy.core.cache.entry import CacheKey, StoredResponse
from proxy.core.purge.purges import Purge, PurgeResult


@dataclass(frozen=True, slots=True)
class ClearResult:
    domain: str
    entries_dropped: int  # entries that can no longer be served
    generation: int  # the domain's generation after the clear (a fleet clear: its number)
    bytes_dropped: int = 0  # the bytes of those entries (a fleet member's figures)
    acked: int | None = None  # a fleet clear: the live edge processes that applied it
    live: int | None = None  # a fleet clear: the edge processes whose lease was live
    epoch: str | None = None  # a fleet clear: the fleet's epoch its number belongs to


@dataclass(frozen=True, slots=True)
class DomainStats:
    entries: int = 0  # DomainStats(): nothing stored for the domain
    bytes: int = 0


@dataclass(frozen=True, slots=True)
class StoreStats:
    entries: int  # live and not yet reclaimed
    bytes: int
    max_bytes: int
    evictions: int
    pending_reclaim: int  # entries of cleared generations not yet reclaimed
    # The purge state beside the entries (decision 0037): its bytes, its budget
    # (cache.purge_state_max_bytes), and what folding it has done: remembered purges
    # forgotten, outstanding prefixes and tags retired, domains cleared. 0: not counted.
    purge_state_bytes: int = 0
    purge_state_max_bytes: int = 0
    purges_forgotten: int = 0
    purges_retired: int = 0
    purge_folds_cleared: int = 0


@dataclass(frozen=True, slots=True)
class Lookup:
    """What one lookup found: the key it looked under, which carries the domain's generation
    at that moment (a fill stores its response under this key, and the store refuses it once
    the domain has been cleared since), and the variants stored there, most recent first."""

    key: CacheKey
    variants: Sequence[StoredResponse]
    # Why the store cannot answer from its cache at all (the edge forwards, and says so in
    # Cache-Status): "fenced" when a fleet member's lease has run out (0014).
    bypass: str | None = None
    # The tier that answered when it was not the memory tier ("disk": the node's shared tier,
    # proxy/store/tiered.py), for Cache-Status.
    tier: str | None = None


class Store(Protocol):
    """Where cached responses live. Callers name a URL by its domain and its target: for
    ``peek``, ``lookup`` and the keys, the request-target as ``core.keys.cache_target``
    marks it for the scheme; for ``invalidate`` and purges, the request-target alone, which
    covers both schemes. The store applies the domain's current generation itself, in the
    same step as the lookup, so no clear can land between reading the generation and
    reading the entry (with a remote store, that gap would be a network round trip)."""

    def peek(self, domain: str, target: str) -> StoredResponse | None:
        """The common case of ``lookup``, answered at once without awaiting: the response
        stored under the domain's current generation when it is the key's one variant. None
        when there is none, or when the store cannot tell without I/O (the caller then
        awaits ``lookup``). The edge asks this first for every request that could be a
        fresh hit, so it must cost no more than a dict lookup."""
        ...

    async def lookup(self, domain: str, target: str) -> Lookup:
        """The variants stored for the URL under the domain's current generation."""
        ...

    async def put(self, key: CacheKey, response: StoredResponse) -> bool:
        """Store a variant under a key from ``lookup``. False (and nothing stored) if the
        domain has been cleared since that lookup, or the response is larger than the
        store's whole budget (cache.max_bytes)."""
        ...

    async def invalidate(self, domain: str, target: str) -> int:
        """Drop every variant stored for one request-target of the domain, over either
        scheme (RFC 9111 §4.4)."""
        ...

    def clear_now(self, domain: str) -> ClearResult:
        """Make everything stored for the domain unservable, at once, without suspending
        (the module docstring): in effect for every later ``peek``, ``lookup`` and ``put``
        once it returns. Says what the clear made unservable."""
        ...

    def purge_now(self, domain: str, purge: Purge) -> PurgeResult:
        """Purge URLs, prefixes, tags or all of the domain, hard or soft (core/purges.py,
        decision 0024), without suspending: in effect for every later ``peek``, ``lookup``
        and ``put`` once it returns. Not a dry run (ValueError): that is ``purge``'s."""
        ...

    async def clear_domain(self, domain: str) -> ClearResult:
        """``clear_now``, for callers that await."""
        ...

    async def purge(self, domain: str, purge: Purge) -> PurgeResult:
        """``purge_now``, or for a dry run, what the purge would cover now, counted without
        changing anything (it may walk the domain's keys in slices, and suspend between
        them)."""
        ...

    async def domain_stats(self, domain: str) -> DomainStats: ...

    async def stats(self) -> StoreStats: ...


class Purger(Protocol):
    """What the clear-cache API calls. Returns only once the clear is in effect."""

    @property
    def name(self) -> str | None:
        """The control plane that answers, in the audit log (a fleet may have several)."""
        ...

    async def clear_domain(self, domain: str) -> ClearResult: ...

    async def purge(self, domain: str, purge: Purge) -> PurgeResult:
        """Purge by URL, prefix, tag or all, hard or soft, or a dry run (decision 0024).
        Returns only once the purge is in effect wherever the domain is served."""
        ...


@dataclass(frozen=True, slots=True)
class Position:
    """Where a domain stands in a fleet's one series of numbers (issue 34 B3): ``number``,
    the latest number the fleet gave a clear or purge of any domain; ``generation``, the
    number of the domain's last clear (0: never cleared)."""

    number: int
    generation: int


@runtime_checkable
class Positioned(Protocol):
    """A purger with a fleet behind it, whose numbers are not the edge processes' own:
    dry runs and traces give these instead, so that every number an operator sees is of the
    series receipts are in."""

    async def position(self, domain: str) -> Position: ...


class LocalPurger:
    """Purges this process's store (one process, no fleet: proxy/fleet/purger.py is the
    fleet's)."""

    name = None

    def __init__(self, store: Store) -> None:
        self._store = store

    async def clear_domain(self, domain: str) -> ClearResult:
        return await self._store.clear_domain(domain)

    async def purge(self, domain: str, purge: Purge) -> PurgeResult:
        return await self._store.purge(domain, purge)
