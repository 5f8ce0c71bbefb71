"""Two tiers behind one Store: this process's memory tier in front of the node's shared tier.

Theory of operation (issue 23, decision 0030):

- ``peek`` is the memory tier's own bound method: the fast hit path costs exactly what it
  cost with the memory tier alone.
- ``lookup`` asks the memory tier, then the shared tier (a read transaction on a shared map,
  in this thread: no other process involved). A shared hit is copied into the memory tier
  when it fits the memory tier's share for one object (``memory_object_max``), with the
  precomputed lines of a fresh hit the record keeps (``hit_lines``), so every later hit of
  it in this process takes the edge's fast path; and the
  lookup says ``tier="disk"`` so that Cache-Status can name the tier that answered.
- ``put`` stores in the memory tier (when the object fits its share), then runs the shared
  fill in the tier's writer thread (the event loop never waits for the disk; the request
  does, for one unsynced LMDB commit, so that the next request finds the object in every
  worker: one origin request per object per node). The shared fill stores under
  the purge number the shared tier had at the lookup (kept per lookup key in ``_tokens``), so
  a purge that lands in between refuses it; a put without a recorded lookup is not written
  to the shared tier (never an entry that could predate a purge it missed).
- Purges and clears go to the shared tier first and are durable (fsync of its purge state)
  before the call returns; then to the memory tier. The API answers 200 only after that.
  ``clear_now``/``purge_now`` (a fleet member's batch, which must not suspend) wait for the
  fsync on the event loop: a few milliseconds per purge, the price of a purge that holds
  across a crash. A purge the shared tier cannot make durable stops the tier in this process
  (it serves nothing more until the node restarts, and its entries are voided for that
  start): the purge still holds here, and ``not_durable`` counts it for /readyz and
  /metrics. In a fleet every edge process applies every purge, so each stops its own tier.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import replace

from proxy.core.cache.entry import CacheKey, StoredResponse
from proxy.core.cache.trace import Held
from proxy.core.purge.purges import Purge, PurgeResult
from proxy.store.base import ClearResult, DomainStats, Lookup, StoreStats
from proxy.store.memory import MemoryStore
from proxy.store.shared import Fill, SharedEntry, SharedHit, SharedStats, SharedTier
from proxy.store.shared.markers import Markers

log = logging.getLogger("proxy.store")

# A shared hit as the memory tier keeps it: (domain, key target, response) -> its copy, with
# the hit lines of a memory hit under the current config (the edge's Via and Cache-Status:
# a record keeps the lines of its fill) and without the pairs beside them (``lean``).
Relabel = Callable[[str, str, StoredResponse], StoredResponse]


def _as_stored(domain: str, target: str, response: StoredResponse) -> StoredResponse:
    return response.lean()


TOKENS_MAX = 8192  # lookups whose shared purge number is remembered for their put
MEMORY_SHARE = 8  # with a shared tier, the memory tier holds objects up to max_bytes / 8
CHUNK = 1 << 16  # bytes per append of a shared fill


class TieredStore:
    def __init__(
        self, memory: MemoryStore, tier: SharedTier, *, memory_object_max: int | None = None
    ) -> None:
        self.memory = memory
        self.tier = tier
        self.memory_object_max = (
            memory.max_bytes // MEMORY_SHARE if memory_object_max is None else memory_object_max
        )
        # The hit path: the memory tier's own bound method, no call of ours in between.
        self.peek = memory.peek  # type: ignore[method-assign]
        self._tokens: OrderedDict[CacheKey, int] = OrderedDict()
        self._fills: set[asyncio.Future[bool]] = set()
        self.hits = {"memory": 0, "disk": 0}  # lookups answered by each tier (not peeks)
        self.not_durable = 0  # purges the shared tier could not make durable
        # Fill-in-progress markers, for one origin request per key across workers (§2).
        self.markers = Markers(tier.directory)
        self.collapsed = 0  # misses answered by another worker's fill
        # How a shared hit is kept in the memory tier: the edge gives its own (``Relabel``);
        # without one, as the record has it, the pairs dropped.
        self.relabel: Relabel = _as_stored

    # -- reading and storing ---------------------------------------------------------------------

    def peek(self, domain: str, target: str) -> StoredResponse | None:
        """``Store.peek``: the memory tier's (replaced in ``__init__`` by its bound method)."""
        return self.memory.peek(domain, target)

    def inspect(self, domain: str, target: str) -> Held:
        """The trace's read (``MemoryStore.inspect``): the memory tier's when it holds the URL,
        else the variants the shared tier holds, judged against its purges as a lookup judges
        them. Nothing is copied into memory, no body is read and no hit is counted."""
        held = self.memory.inspect(domain, target)
        if held.variants or held.pending:
            return held
        shared = self.tier.lookup(domain, target)
        if not shared.variants:
            return held
        return replace(held, variants=tuple(entry.response for entry in shared.variants))

    async def lookup(self, domain: str, target: str) -> Lookup:
        found = await self.memory.lookup(domain, target)
        if found.variants:
            self.hits["memory"] += 1
            return found
        shared = self.tier.lookup(domain, target)
        tokens = self._tokens
        known = tokens.get(found.key)
        tokens[found.key] = shared.token if known is None else min(known, shared.token)
        if len(tokens) > TOKENS_MAX:
            tokens.popitem(last=False)
        if not shared.variants:
            return found
        variants = [r for r in [await self._whole(e) for e in shared.variants] if r is not None]
        if not variants:
            return found
        for response in reversed(variants):  # oldest first: the newest ends first in memory
            await self._keep(found.key, response)
        self.hits["disk"] += 1
        return Lookup(found.key, variants, tier="disk")

    def peek_shared(self, domain: str, target: str) -> SharedHit | None:
        """The edge's fast path when ``peek`` found nothing: the shared tier's one variant of
        a URL the memory tier holds nothing for (``SharedTier.peek``: judged against the
        purges as ``lookup`` judges), or None and ``lookup`` answers. The caller keeps it in
        the memory tier (``keep``) and counts it as a disk hit once it serves it."""
        if self.memory.holds(domain, target):  # several variants, say: lookup's to choose
            return None
        return self.tier.peek(domain, target)

    async def keep(self, domain: str, target: str, hit: SharedHit) -> None:
        """A hit ``peek_shared`` found, copied into the memory tier as ``lookup`` copies one,
        when it fits its share: the next hit on it is a memory hit."""
        response = hit.response()
        if response is not None and response.size <= self.memory_object_max:
            found = await self.memory.lookup(domain, target)
            if not found.variants:
                await self.memory.put(found.key, self.relabel(domain, target, response))

    async def _keep(self, key: CacheKey, response: StoredResponse) -> None:
        """A shared hit copied into the memory tier, when it fits its share."""
        if response.size <= self.memory_object_max:
            await self.memory.put(key, self.relabel(key[0], key[2], response))

    async def _whole(self, entry: SharedEntry) -> StoredResponse | None:
        """The entry's response with its body; a body in a file is read (and checked) in a
        thread. None when it fails its checks (never served)."""
        if entry.path is None:
            return entry.response
        body = await asyncio.to_thread(self.tier.read_all, entry)
        if body is None:
            return None
        return replace(entry.response, body=body)

    async def put(self, key: CacheKey, response: StoredResponse) -> bool:
        stored = False
        if response.size <= self.memory_object_max:
            stored = await self.memory.put(key, response)
        # Kept for the key's other puts (each coding of a compressed object is one): all of
        # them fill under the purge number of the one lookup.
        token = self._tokens.get(key)
        if token is None or self.tier.health.stuck:
            return stored
        domain, _, target = key
        # Awaited, in the writer thread (never on the event loop): once put returns, every
        # worker of the node finds the object, so the next request for it is a hit anywhere.
        filled = asyncio.ensure_future(
            self.tier.run(lambda: self._fill(domain, target, response, token))
        )
        self._fills.add(filled)
        filled.add_done_callback(self._fills.discard)
        return await asyncio.shield(filled) or stored

    def _fill(self, domain: str, target: str, response: StoredResponse, token: int) -> bool:
        """One shared fill, whole, in the tier's writer thread."""
        fill = Fill(self.tier, domain, target, response, token)
        body = response.body
        for start in range(0, len(body), CHUNK):
            if not fill.append(body[start : start + CHUNK]):
                return False
        return fill.commit()

    async def invalidate(self, domain: str, target: str) -> int:
        dropped = await self.memory.invalidate(domain, target)
        if self.tier.lookup(domain, target).variants:  # a hard URL purge: durable, per URL
            await self._durable(self.tier.purge_async(domain, Purge("url", (target,))))
        return dropped

    # -- purges: the shared tier's state first, durable, then the memory tier -------------------

    def clear_now(self, domain: str) -> ClearResult:
        self._check(self.tier.clear_domain(domain))
        return self.memory.clear_now(domain)

    def purge_now(self, domain: str, purge: Purge) -> PurgeResult:
        if purge.dry_run:
            raise ValueError("a dry run is a read: Store.purge")
        self._check(self.tier.purge(domain, purge))
        return self.memory.purge_now(domain, purge)

    async def clear_domain(self, domain: str) -> ClearResult:
        await self._durable(self.tier.clear_domain_async(domain))
        return self.memory.clear_now(domain)

    async def purge(self, domain: str, purge: Purge) -> PurgeResult:
        if purge.dry_run:  # counted in the memory tier only (a count of the disk is a scan)
            return await self.memory.purge(domain, purge)
        await self._durable(self.tier.purge_async(domain, purge))
        return self.memory.purge_now(domain, purge)

    async def _durable(self, written: Awaitable[int | None]) -> None:
        self._check(await written)

    def _check(self, number: int | None) -> None:
        if number is None:  # the tier stopped itself (SharedTier._durably): it serves nothing
            self.not_durable += 1
            log.error(
                "shared tier %s: a purge could not be made durable; the tier is stopped "
                "until the node restarts (the purge holds: nothing is served from it)",
                self.tier.directory,
            )

    # -- figures and lifecycle -------------------------------------------------------------------

    async def domain_stats(self, domain: str) -> DomainStats:
        return await self.memory.domain_stats(domain)

    async def stats(self) -> StoreStats:
        return await self.memory.stats()

    def shared_stats(self) -> SharedStats:
        self.tier.check_directory()  # a directory deleted under a quiet process shows at once
        return self.tier.stats()

    @property
    def disk_hits(self) -> int | None:
        return self.hits["disk"]

    async def close(self) -> None:
        """Wait for the shared fills under way (each is short: one body already in hand)."""
        if self._fills:
            await asyncio.gather(*self._fills, return_exceptions=True)
