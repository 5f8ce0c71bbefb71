"""Two tiers behind one Store: this process's memory tier in front of the node's shared tier.

Theory of operation (issue 23, decision 0030):

- ``peek`` is the memory tier's own bound method: the fast hit path costs exactly what it
  cost with the memory tier alone.
- ``lookup`` asks the memory tier, then the shared tier (a read transaction on a shared map,
  in this thread: no other process involved). A shared hit is copied into the memory tier
  when it fits the memory tier's share for one object (``memory_object_max``), with the
  precomputed lines of a fresh hit the record keeps (``hit_lines``), so every later hit of
  it in this process takes the edge's fast path; and the
  lookup says ``tier="disk"`` so that Cache-Status can name the tier that answered. A body
  in a file larger than that share is not read: the entry is a ``FileBacked`` response, and
  the edge sends its body from the file (decision 0039, store/shared/large.py).
- ``put`` stores in the memory tier (when the object fits its share), then runs the shared
  fill in the tier's writer thread (the event loop never waits for the disk; the request
  does, for one unsynced LMDB commit, so that the next request finds the object in every
  worker: one origin request per object per node). The shared fill stores under
  the purge number the shared tier had at the lookup (kept per lookup key in ``_tokens``), so
  a purge that lands in between refuses it; a put without a recorded lookup is not written
  to the shared tier (never an entry that could predate a purge it missed).
- ``stream`` is the fill of a large object (decision 0039): its body is appended to the
  shared tier's body file as it arrives from the origin, while the edge sends it to the first
  client; it is never whole in memory, and never in the memory tier.
- Purges and clears go to the shared tier first and are durable (fsync of its purge state)
  before the call returns; then to the memory tier. The API answers 200 only after that.
  A fleet member's batch (decision 0048) goes through ``apply_fleet``: the batch's writes to
  the shared tier in one synced transaction in the tier's writer thread, made only by the
  first worker of the node to get there (node_writes.py), then the member applies the batch
  to ``memory`` without suspending. ``clear_now``/``purge_now`` still write the tier on the
  caller's thread (the Store protocol's plain methods; no event loop calls them with a
  tier). A purge the shared tier cannot make durable stops the tier in this process
  (it serves nothing more until the node restarts, and its entries are voided for that
  start): the purge still holds here, and ``not_durable`` counts it for /readyz and
  /metrics.
- A fleet member that cannot know what its node missed (a new epoch, a trimmed log) distrusts
  the shared tier instead of clearing it (``distrust_now``, decision 0040): its entries are
  served again only once revalidated by the origin, a burst of 304s instead of a refill.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any

from proxy.core.cache.entry import CacheKey, StoredResponse
from proxy.core.cache.keys import scheme_targets
from proxy.core.cache.trace import Held
from proxy.core.purge.purges import Purge, PurgeResult
from proxy.store.base import ClearResult, DomainStats, Lookup, StoreStats
from proxy.store.memory import MemoryStore
from proxy.store.shared import (
    Fill,
    SharedEntry,
    SharedHit,
    SharedLookup,
    SharedStats,
    SharedTier,
)
from proxy.store.shared.bodies import Verified
from proxy.store.shared.fill import AsyncFill
from proxy.store.shared.large import BodyFile, FileBacked
from proxy.store.shared.markers import Markers
from proxy.store.shared.node_writes import FleetBatch
from proxy.store.shared.sweep import held as held_entries

log = logging.getLogger("proxy.store")

# A shared hit as the memory tier keeps it: (domain, key target, response) -> its copy, with
# the hit lines of a memory hit under the current config (the edge's Via and Cache-Status:
# a record keeps the lines of its fill) and without the pairs beside them (``lean``).
Relabel = Callable[[str, str, StoredResponse], StoredResponse]


def _as_stored(domain: str, target: str, response: StoredResponse) -> StoredResponse:
    return response.lean()


def _fill_of(response: StoredResponse, length: int) -> tuple[object, ...]:
    """What tells one fill of a URL from another, in either tier: its age's origin, status,
    validators and body length (a refresh by a 304 keeps the body and validators)."""
    return (response.birth, response.status, response.etag, response.last_modified, length)


TOKENS_MAX = 8192  # lookups whose shared purge number is remembered for their put
MEMORY_SHARE = 8  # with a shared tier, the memory tier holds objects up to max_bytes / 8
CHUNK = 1 << 16  # bytes per append of a shared fill


class TieredStore:
    def __init__(
        self,
        memory: MemoryStore,
        tier: SharedTier,
        *,
        memory_object_max: int | None = None,
        sendfile: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.memory = memory
        self._clock = clock  # wall clock, as the memory tier's: whether what it holds is fresh
        self.tier = tier
        self.memory_object_max = (
            memory.max_bytes // MEMORY_SHARE if memory_object_max is None else memory_object_max
        )
        # The hit path: the memory tier's own bound method, no call of ours in between.
        self.peek = memory.peek  # type: ignore[method-assign]
        self._tokens: OrderedDict[CacheKey, int] = OrderedDict()
        self._fills: set[asyncio.Future[Any]] = set()  # shared fills, and refusals remembered
        self.hits = {"memory": 0, "disk": 0}  # lookups answered by each tier (not peeks)
        self.not_durable = 0  # purges the shared tier could not make durable
        # Fill-in-progress markers, for one origin request per key across workers (§2).
        self.markers = Markers(tier.directory)
        self.collapsed = 0  # misses answered by another worker's fill
        self.verified = Verified(sendfile=sendfile)  # files checked whole: sent unchecked (0039)
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
        shared = self.tier.inspect(domain, target)
        if not shared.variants:
            return held
        return replace(held, variants=tuple(entry.response for entry in shared.variants))

    async def lookup(self, domain: str, target: str) -> Lookup:
        found = await self.memory.lookup(domain, target)
        if found.variants:
            now = self._clock()
            if any(response.is_fresh(now) for response in found.variants):
                self.hits["memory"] += 1
                return found
            return await self._behind_stale(domain, target, found)
        shared = self.tier.lookup(domain, target)
        self._remember(found.key, shared.token)
        if not shared.variants:
            return found
        return await self._from_shared(found, shared)

    def _remember(self, key: CacheKey, token: int) -> None:
        """The shared purge number a put of ``key`` stores under: the lowest of its lookups'."""
        tokens = self._tokens
        known = tokens.get(key)
        tokens[key] = token if known is None else min(known, token)
        if len(tokens) > TOKENS_MAX:
            tokens.popitem(last=False)

    async def _behind_stale(self, domain: str, target: str, found: Lookup) -> Lookup:
        """The memory tier holds only stale variants of the URL, and another worker may have
        refilled or revalidated it in the shared tier since (edge/node_fills.py). A fresh
        variant in the shared tier answers instead (and is kept in the memory tier). Else
        the memory tier's answer stands; and when the shared tier holds one of those very
        fills, not covered by any purge, its purge number is remembered, so that the entry
        the revalidation refreshes is stored there too, for every worker. A stale variant
        the shared tier no longer holds (purged, evicted) gets no number: its refresh stays
        in this process."""
        shared = self.tier.lookup(domain, target)
        now = self._clock()
        if any(entry.response.is_fresh(now) for entry in shared.variants):
            self._remember(found.key, shared.token)
            return await self._from_shared(found, shared)
        held = {_fill_of(response, len(response.body)) for response in found.variants}
        if any(_fill_of(entry.response, entry.length) in held for entry in shared.variants):
            self._remember(found.key, shared.token)
        self.hits["memory"] += 1
        return found

    async def _from_shared(self, found: Lookup, shared: SharedLookup) -> Lookup:
        """The shared tier's variants, read whole, kept in the memory tier, as a disk hit."""
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
        self.keep_now(domain, target, hit)

    def keep_now(self, domain: str, target: str, hit: SharedHit) -> None:
        """``keep`` for the hit lane, which answers from ``data_received`` and cannot await
        (decision 0050). The copy is made in the same step as the read (no purge can land
        in between), as ``keep`` makes it."""
        response = hit.response()
        if response is not None and response.size <= self.memory_object_max:
            found = self.memory.lookup_now(domain, target)
            if not found.variants:
                self.memory.put_now(found.key, self.relabel(domain, target, response))

    async def _keep(self, key: CacheKey, response: StoredResponse) -> None:
        """A shared hit copied into the memory tier, when it fits its share."""
        if response.size <= self.memory_object_max:
            await self.memory.put(key, self.relabel(key[0], key[2], response))

    async def _whole(self, entry: SharedEntry) -> StoredResponse | None:
        """The entry's response with its body; a body in a file is read (and checked) in a
        thread, unless it is larger than the memory tier's share: then the file is sent
        (``FileBacked``). None when it fails its checks (never served)."""
        if entry.path is None:
            return entry.response
        if entry.length > self.memory_object_max:
            if self.tier.is_doomed(entry.key):
                return None  # found corrupt by an earlier send: a miss until it is replaced
            return FileBacked(entry.response, BodyFile(entry, self.tier, self.verified))
        body = await asyncio.to_thread(self.tier.read_all, entry)
        if body is None:
            return None
        return replace(entry.response, body=body)

    async def put(self, key: CacheKey, response: StoredResponse) -> bool:
        if isinstance(response, FileBacked):  # its body is not in hand: never copied
            return False
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
        fill: Fill = await asyncio.shield(filled)
        if fill.refused:
            self._refused(key, token)
        return fill.committed or stored

    def _fill(self, domain: str, target: str, response: StoredResponse, token: int) -> Fill:
        """One shared fill, whole, in the tier's writer thread."""
        fill = Fill(self.tier, domain, target, response, token)
        body = response.body
        for start in range(0, len(body), CHUNK):
            if not fill.append(body[start : start + CHUNK]):
                return fill
        fill.commit()
        return fill

    def _refused(self, key: CacheKey, token: int) -> None:
        """A fill under ``token`` was refused: a purge since (an invalidation by another
        worker, say) covers it. The number is forgotten, or every later fill of the key would
        be refused too (``_remember`` keeps the lowest), and the URL never stored in the tier
        again; the next lookup remembers the current one. Safe because the edge collapses a
        key's misses into one fill per process (edge/fill.py): no older fill of the key is
        still on its way to use the newer number."""
        if self._tokens.get(key) == token:
            del self._tokens[key]

    def stream(
        self, key: CacheKey, response: StoredResponse, length: int | None = None
    ) -> StreamedFill | None:
        """A fill of the shared tier whose body the caller appends as it arrives (its
        ``response.body`` is ignored); None when it cannot be stored (no lookup recorded its
        purge number, or the tier is stopped), or when the eviction policy would refuse a
        body of ``length`` bytes (when known): a first fill of over half the tier is then
        not written at all, and remembered, so that its next fill is kept."""
        token = self._tokens.get(key)
        if token is None or self.tier.health.stuck:
            return None
        domain, _, target = key
        fill = AsyncFill(self.tier, domain, target, response, token)
        if length is not None and not fill.fill.kept_if_filled(length):
            remembered = asyncio.ensure_future(self.tier.run(lambda: fill.fill.remember(length)))
            self._fills.add(remembered)
            remembered.add_done_callback(self._fills.discard)
            return None
        return StreamedFill(self, fill, key)

    async def relink(
        self, key: CacheKey, response: StoredResponse, file: BodyFile
    ) -> FileBacked | None:
        """Store a refreshed entry of a large object (a 304 kept its body) with the body file
        it had, hard-linked: no byte of the body is copied. None when it cannot be."""
        token = self._tokens.get(key)
        entry = file.entry
        if token is None or self.tier.health.stuck or entry.path is None:
            return None
        domain, _, target = key
        source = entry.path

        def refill() -> bytes | None:
            fill = Fill(self.tier, domain, target, response, token)
            if fill.adopt(source, entry.length, entry.table_crc) and fill.commit():
                return fill.key
            return None

        stored = await self.tier.run(refill)
        # The same inode, size and time: checked whole already if the old name was.
        return None if stored is None else self.committed(domain, target, stored)

    def committed(self, domain: str, target: str, key: bytes) -> FileBacked | None:
        """The large entry a fill just committed under ``key``, as a lookup reads it (its
        body file, sequence and chunk table's CRC; judged against the purges since). None
        when it is not there, or its body is not in a file."""
        for entry in self.tier.lookup(domain, target).variants:
            if entry.key == key and entry.path is not None:
                return FileBacked(entry.response, BodyFile(entry, self.tier, self.verified))
        return None

    async def invalidate(self, domain: str, target: str) -> int:
        """Drop the request-target's entries, for either scheme (RFC 9111 §4.4): this
        process's memory copies, and in the shared tier (for every worker) a hard URL purge,
        durable, written when the tier holds the URL under either scheme's key."""
        dropped = await self.memory.invalidate(domain, target)
        if any(self.tier.holds(domain, key) for key in scheme_targets(target)):
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

    def distrust_now(
        self, domains: Sequence[str], *, every: bool, made_for: str = ""
    ) -> list[ClearResult]:
        """A fleet member cannot know what its node missed (decision 0040): a new epoch
        (``every``: the whole tier, one durable write, named by ``made_for``) or a log
        trimmed past what it applied (``domains``, each). The shared tier's entries are then
        served only once the origin has revalidated them; the memory tier of ``domains`` is
        cleared (this process's copies, filled again from the tier). Lookups made before it
        no longer fill the shared tier (their marks are under the floor anyway)."""
        if every:
            self._check(self.tier.distrust(None, made_for.encode()))
        else:
            for domain in domains:
                self._check(self.tier.distrust(domain))
        self._tokens.clear()
        return [self.memory.clear_now(domain) for domain in domains]

    async def apply_fleet(self, batch: FleetBatch) -> None:
        """A fleet batch's writes to the shared tier (a member's, before it applies the batch
        to ``memory``): durable when this returns, written in the tier's writer thread, and
        only when no other worker of the node has written them (node_writes.py). A distrust
        also forgets this process's lookups, as ``distrust_now`` does."""
        self._check(await self.tier.run(lambda: self.tier.apply_fleet(batch)))
        if batch.every or any(write.distrust for write in batch.writes):
            self._tokens.clear()

    async def clear_domain(self, domain: str) -> ClearResult:
        """The API's clear on a node of one process: the shared tier's, durable, then the
        memory tier's; the entries dropped are both tiers' (the tier's counted first)."""
        tier = self.tier
        held = await tier.run(lambda: held_entries(tier, domain))
        await self._durable(tier.clear_domain_async(domain))
        result = self.memory.clear_now(domain)
        return replace(result, entries_dropped=result.entries_dropped + held)

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


class StreamedFill:
    """One large object streamed into the shared tier (``TieredStore.stream``)."""

    def __init__(self, store: TieredStore, fill: AsyncFill, key: CacheKey) -> None:
        self._store = store
        self._fill = fill
        self._key = key

    async def append(self, data: bytes) -> bool:
        """The next bytes of the body; False once the fill is dropped (stop appending)."""
        return await self._fill.append(data)

    def abort(self) -> None:
        """Drop it (queued in the writer thread: it never waits)."""
        self._fill.abort_soon()

    async def commit(self) -> FileBacked | None:
        """Store it: the stored entry, its body sent from its file; None when it was dropped,
        refused (a purge since its lookup) or kept inline (a body too short to stream)."""
        store = self._store
        tier = store.tier
        if not await self._fill.commit():
            if self._fill.fill.refused:
                store._refused(self._key, self._fill.fill.token)
            return None
        domain, _, target = self._key
        stored = store.committed(domain, target, self._fill.fill.key)
        path = None if stored is None else stored.file.entry.path
        if path is not None:  # the CRCs were taken of the bytes this process wrote: checked
            with contextlib.suppress(OSError):
                store.verified.add(await tier.run(lambda: os.stat(path)))
        return stored
