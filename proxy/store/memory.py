"""The in-memory store: bounded, evicting with SIEVE, cleared by generation.

Layout:
- ``_index`` maps each key to its variants (one per Vary combination): the response itself
  when there is one (the usual case, no list to keep per key), a list of them, newest first,
  when there are several. Every key belongs to one bucket, the (domain, generation) it was
  stored under.
- ``_policy`` (SIEVE, decision 0029) holds the same keys with their variants' summed size and
  chooses what to evict: a FIFO queue, a visited bit per key. A hit sets the bit in place,
  ``visited[slots[key]] = 1``, not a call (decision 0029's hit cost); a burst of keys read once
  passes through without flushing the keys read again, as LRU's order would. Its ``used``
  equals ``_bytes`` throughout.
- Inside the store a key is one string, "domain generation target" (``Key``): 48 bytes less an
  entry than the (domain, generation, target) tuple and its own target string. It cannot
  collide: a domain holds no space and a generation is digits, so the first two spaces split
  any key back into the tuple it was made from (``parse_key``).
- A clear moves the domain to a new generation and queues the old bucket for reclaim. Nothing
  is touched per entry, so the clear costs the same with 10 or 1,000,000 entries. The old
  keys can never be built again (keys carry the generation), so they are never served.
- ``reclaim`` deletes the keys of cleared buckets in small slices between requests
  (reclaim.py); until then they count against max_bytes and may be evicted like any other.
- Nothing the garbage collector walks grows with the number of entries. A full collection
  visits every tracked object, and with an entry each it stalled every request for about 0.8
  microseconds per entry (84 ms at 100k entries). So a stored entry is untracked when
  ``holds_no_cycle`` shows it refers only to strings, bytes, numbers, None and tuples of them
  (it can never be part of a cycle; one that fails the check stays tracked), a bucket's keys
  are sealed into tuples of KEY_CHUNK strings (which the collector untracks by itself once it
  has seen them), and the index and the policy's containers were made before the service
  froze its start-up heap (``gc.freeze``), so no collection walks them; the policy keeps its
  keys in flat arrays, with no object per key. Decision 0011 has the options and numbers.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable, Sequence

from proxy.core.cache.entry import CacheKey, StoredResponse
from proxy.core.cache.keys import scheme_targets
from proxy.core.cache.trace import Held
from proxy.core.purge.purges import Purge, PurgeResult
from proxy.core.purge.retention import DEFAULT_MAX_BYTES
from proxy.store import inspecting, settling
from proxy.store.base import ClearResult, DomainStats, Lookup, StoreStats
from proxy.store.entries import (
    Bucket,
    Key,
    Stored,
    joined_key,
    parse_key,
    settled,
    soft_expired,
    untrack,
    variants_of,
)
from proxy.store.eviction import Sieve
from proxy.store.purging import KEY_CHUNK as KEY_CHUNK
from proxy.store.purging import (
    DomainPurges,
    PurgeBudget,
    Walk,
    dry_count,
    fold,
)
from proxy.store.reclaim import RECLAIM_CHECK as RECLAIM_CHECK
from proxy.store.reclaim import Doomed

MAX_VARIANTS_PER_KEY = 16
COMPACT_SLACK = 64  # listed keys beyond twice the live ones before a bucket's list is compacted


class MemoryStore:
    def __init__(
        self,
        *,
        max_bytes: int,
        on_clear: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.time,
        purge_max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        self.max_bytes = max_bytes
        # the purge state's own bound (cache.purge_state_max_bytes, decision 0037)
        self.purge_budget = PurgeBudget(max_bytes=purge_max_bytes)
        self._on_clear = on_clear  # called when there is work for ``reclaim`` or ``settle``
        self._clock = clock  # wall clock, as the edge's: a soft purge's time
        self._index: dict[Key, Stored] = {}
        self._policy = Sieve[Key](max_bytes)
        self._slots, self._visited = self._policy.hit_bits()
        self._generations: dict[str, int] = {}
        # domain -> "domain generation " of its generation, for domains with no lazy purge
        # outstanding, whose entries ``peek`` serves unchecked
        self._prefixes: dict[str, str] = {}
        self._purges: dict[str, DomainPurges] = {}  # domains purged other than by a clear
        self._buckets: dict[tuple[str, int], Bucket] = {}
        self._doomed = Doomed()
        self._bytes = 0
        self._entries = 0
        self._evictions = 0

    # -- the Store protocol ------------------------------------------------------------------

    def peek(self, domain: str, target: str) -> StoredResponse | None:
        """The response stored for the domain's current generation when it is the key's only
        variant (``Store.peek``). Like ``lookup`` it marks the key visited."""
        prefix = self._prefixes.get(domain)
        if prefix is None:
            return self._peek_purged(domain, target)
        key = prefix + target
        stored = self._index.get(key)
        if stored is None:
            return None
        self._visited[self._slots[key]] = 1
        # type(), not isinstance(stored, list): measured cheaper by 270 instructions a hit.
        return stored if type(stored) is StoredResponse else None

    def _peek_purged(self, domain: str, target: str) -> StoredResponse | None:
        """``peek`` for a domain not in ``_prefixes``: first seen, cleared, or with lazy
        purges outstanding, whose entries are checked against them (once each)."""
        state = self._purges.get(domain)
        if state is None or not state.top:
            self._prefixes[domain] = f"{domain} {self._generations.get(domain, 0)} "
            return self.peek(domain, target)
        key = state.prefix + target
        stored = self._index.get(key)
        if stored is None:
            return None
        # Checked already (the usual case once each entry has been read once): served.
        if type(stored) is not StoredResponse or stored.mark < state.top:
            stored = self._settled(state, key, target, stored)
            if stored is None:
                return None
        self._visited[self._slots[key]] = 1
        return stored if type(stored) is StoredResponse else None

    def holds(self, domain: str, target: str) -> bool:
        """Whether anything is stored for the URL (a purge may cover it yet), changing
        nothing: the shared tier answers the fast path only when not (tiered.py)."""
        prefix = self._prefixes.get(domain)  # as ``peek`` has it, when it has it
        if prefix is None:
            prefix = f"{domain} {self._generations.get(domain, 0)} "
        return prefix + target in self._index

    def inspect(self, domain: str, target: str) -> Held:
        """What ``lookup`` would find for the URL, changing nothing: no recency, no purge
        mark, no counter (the trace, core/cache/trace.py). Variants an outstanding lazy
        purge covers hard are left out and counted as ``pending``."""
        generation = self._generations.get(domain, 0)
        stored = self._index.get(f"{domain} {generation} {target}")
        return inspecting.held(stored, target, generation, self._purges.get(domain))

    async def lookup(self, domain: str, target: str) -> Lookup:
        """One step: the domain's generation is read with the entry, never before an await."""
        return self.lookup_now(domain, target)

    def lookup_now(self, domain: str, target: str) -> Lookup:
        """``lookup`` for a caller that cannot await (the hit lane's memory copy of a disk
        hit: ``TieredStore.keep_now``). It never suspends either way."""
        generation = self._generations.get(domain, 0)
        state = self._purges.get(domain)
        # The key carries the domain's purge number (its generation until it is first purged
        # other than by a clear): ``put`` tells from it what was purged since.
        key = (domain, generation if state is None else state.number, target)
        joined = f"{domain} {generation} {target}"
        stored = self._index.get(joined)
        if stored is not None and state is not None and state.top:
            stored = self._settled(state, joined, target, stored)
        if stored is None:
            return Lookup(key, ())
        self._visited[self._slots[joined]] = 1
        return Lookup(key, variants_of(stored))

    async def put(self, key: CacheKey, response: StoredResponse) -> bool:
        return self.put_now(key, response)

    def put_now(self, key: CacheKey, response: StoredResponse) -> bool:
        """``put`` for a caller that cannot await (``TieredStore.keep_now``)."""
        domain, token, target = key
        generation = self._generations.get(domain, 0)
        state = self._purges.get(domain)
        if state is None:
            if token != generation:
                return False
        elif token != state.number and not state.fill_allowed(token, target, response.tags):
            return False  # cleared, or purged, since its lookup
        if response.size > self.max_bytes:
            return False
        if " " in domain:  # not a host name (the config allows none): it would not split back
            return False
        bucket = self._buckets.get((domain, generation))
        if bucket is None:
            bucket = self._buckets[(domain, generation)] = Bucket()
        joined = f"{domain} {generation} {target}"
        response.set_mark(0 if state is None else state.number)
        old = self._index.get(joined)
        stored: Stored = response
        if old is not None:
            variants = [response]
            for variant in variants_of(old):
                same_variant = (
                    variant.vary == response.vary and variant.vary_values == response.vary_values
                )
                if same_variant or len(variants) >= MAX_VARIANTS_PER_KEY:
                    self._account(bucket, -1, -variant.size)
                else:
                    variants.append(variant)
            if len(variants) > 1:
                stored = variants
        self._index[joined] = stored
        untrack(response)
        if old is None:
            bucket.add(joined)
            bucket.live += 1
            if bucket.listed > 2 * bucket.live + COMPACT_SLACK:
                index = self._index
                bucket.relist([k for k in dict.fromkeys(bucket.all_keys()) if k in index])
        self._account(bucket, 1, response.size)
        # A key held already takes its new size and counts as a hit (SIEVE: its bit is set).
        total = response.size if stored is response else sum(v.size for v in variants_of(stored))
        for victim in self._policy.admit(joined, total):
            self._evictions += self._drop(victim)
        return True

    async def invalidate(self, domain: str, target: str) -> int:
        """Drop the request-target's entries, for either scheme (core/keys.py)."""
        generation = self._generations.get(domain, 0)
        return sum(self._drop(joined_key((domain, generation, t))) for t in scheme_targets(target))

    async def clear_domain(self, domain: str) -> ClearResult:
        return self.clear_now(domain)

    def clear_now(self, domain: str) -> ClearResult:
        generation = self._generations.get(domain, 0)
        self._generations[domain] = generation + 1
        self._prefixes.pop(domain, None)
        state = self._purges.get(domain)
        if state is not None:
            state.cleared_now(f"{domain} {generation + 1} ")
        bucket = self._buckets.get((domain, generation))
        dropped = size = 0
        if bucket is not None:
            dropped, size = bucket.entries, bucket.bytes
            if bucket.live:
                self._doomed.add((domain, generation), bucket.live)
            else:
                del self._buckets[(domain, generation)]
            if self._on_clear is not None:
                self._on_clear()
        return ClearResult(
            domain=domain, entries_dropped=dropped, generation=generation + 1, bytes_dropped=size
        )

    async def purge(self, domain: str, purge: Purge) -> PurgeResult:
        """``purge_now``, or a dry run: it changes nothing and walks the domain's keys in
        slices (it is a read)."""
        if not purge.dry_run:
            return self.purge_now(domain, purge)
        started = time.perf_counter()
        entries, size, sample = await self._dry_run(domain, purge)
        return self._receipt(
            domain, purge, self._number(domain), entries, size, True, started, sample
        )

    def purge_now(self, domain: str, purge: Purge) -> PurgeResult:
        """Apply one purge to the domain (``Store.purge_now``; core/purges.py, decision
        0024): O(items) for urls, O(1) plus O(items) for prefixes and tags, O(1) for all."""
        if purge.dry_run:
            raise ValueError("a dry run is a read: Store.purge")
        started = time.perf_counter()
        state = self._purges.get(domain)
        exact = state is None or not state.top  # nothing lazy outstanding that may overlap
        bucket = self._buckets.get((domain, self._generations.get(domain, 0)))
        entries, size = (bucket.entries, bucket.bytes) if bucket is not None else (0, 0)
        if purge.kind == "all" and not purge.soft:
            number = self.clear_now(domain).generation
            state = self._purges.get(domain)
            number = number if state is None else state.number
        else:
            state = self._purging(domain)
            number = state.next_number(purge)
            now = self._clock()
            if purge.kind == "url":
                entries, size = self._purge_urls(state, domain, purge, now)
                exact = True
            elif purge.kind == "tag":
                state.add_tags(number, purge.items, purge.soft, now)
                exact = False  # lazy: the domain's entries, an upper bound
            else:  # prefixes, and a soft all: the ban of ""
                prefixes = purge.items if purge.kind == "prefix" else ("",)
                state.add_ban(number, prefixes, purge.soft, now)
                exact = exact and purge.kind == "all"  # all covers every entry: exact
            if state.top:
                self._prefixes.pop(domain, None)  # peek checks the domain's entries now
                if state.walk is None:
                    state.walk = Walk(upto=state.number, relists=bucket.relists if bucket else 0)
                if self._on_clear is not None:
                    self._on_clear()
            if self.purge_budget.held > self.purge_budget.max_bytes:
                self._fold()
        return self._receipt(domain, purge, number, entries, size, exact, started)

    def _receipt(
        self,
        domain: str,
        purge: Purge,
        number: int,
        entries: int,
        size: int,
        exact: bool,
        started: float,
        sample: tuple[str, ...] = (),
    ) -> PurgeResult:
        """The receipt of ``purge`` (applied, or a dry run) begun at ``started`` (perf_counter),
        with the domain's generation now, after it (as core/purge/fleet.py's receipts)."""
        # In PurgeResult's order: what was asked, then what came of it.
        asked = (domain, purge.kind, purge.items, purge.soft, purge.dry_run)
        generation = self._generations.get(domain, 0)
        came = (number, generation, entries, size, exact, time.perf_counter() - started, sample)
        return PurgeResult(*(asked + came))

    async def domain_stats(self, domain: str) -> DomainStats:
        bucket = self._buckets.get((domain, self._generations.get(domain, 0)))
        if bucket is None:
            return DomainStats()
        return DomainStats(entries=bucket.entries, bytes=bucket.bytes)

    async def stats(self) -> StoreStats:
        return StoreStats(
            entries=self._entries,
            bytes=self._bytes,
            max_bytes=self.max_bytes,
            evictions=self._evictions,
            pending_reclaim=self._doomed.pending,
            purge_state_bytes=self.purge_budget.held,
            purge_state_max_bytes=self.purge_budget.max_bytes,
            purges_forgotten=self.purge_budget.forgotten,
            purges_retired=self.purge_budget.retired,
            purge_folds_cleared=self.purge_budget.cleared,
        )

    # -- reclaiming cleared generations -------------------------------------------------------

    @property
    def pending_reclaim(self) -> int:
        return self._doomed.pending

    def reclaim(self, budget: int, *, seconds: float | None = None) -> int:
        """Delete at most ``budget`` keys of cleared generations, and stop once ``seconds`` have
        passed; return how many were deleted (reclaim.py)."""
        return self._doomed.reclaim(budget, seconds, self._buckets, self._drop)

    # -- lazy purges (decision 0024) ------------------------------------------------------------

    @property
    def pending_settle(self) -> bool:
        """Whether some domain has lazy purges the walker has not retired yet."""
        return any(state.walk is not None for state in self._purges.values())

    def settle(self, budget: int, *, seconds: float | None = None) -> int:
        """Check at most ``budget`` listed keys against their domain's outstanding lazy
        purges (``_settled``, marking nothing visited), and stop once ``seconds`` have
        passed; return how many were visited (settling.py)."""
        generations, buckets = self._generations, self._buckets
        return settling.settle(
            self._purges,
            lambda domain: buckets.get((domain, generations.get(domain, 0))),
            self._index,
            self._settled,
            budget,
            seconds,
        )

    def _settled(self, state: DomainPurges, key: Key, target: str, stored: Stored) -> Stored | None:
        """What is stored under the key once the outstanding lazy purges have been applied
        (entries.settled); None when nothing is left."""
        after = settled(state, target, stored)
        if after is None:
            return stored
        new, dropped, change = after
        if new is None:
            self._drop(key)
            return None
        self._account(self._bucket_of(key), -dropped, change)
        self._index[key] = new  # an existing key: its place in the queue is kept
        return new if self._resized(key, new) else None

    def _fold(self) -> None:
        """The purge state is over its budget: fold it (purging.fold, decision 0037), and
        clear the domains whose outstanding purges do not fit in their share."""
        for domain in fold(self._purges, self.purge_budget, self._holds_entries):
            self.clear_now(domain)

    def _holds_entries(self, domain: str) -> bool:
        bucket = self._buckets.get((domain, self._generations.get(domain, 0)))
        return bucket is not None and bucket.live > 0

    def _number(self, domain: str) -> int:
        state = self._purges.get(domain)
        return self._generations.get(domain, 0) if state is None else state.number

    def _purging(self, domain: str) -> DomainPurges:
        """The domain's purge state, made at its first purge other than a clear: its number
        starts where its lookups' keys are (the generation)."""
        state = self._purges.get(domain)
        if state is None:
            generation = self._generations.get(domain, 0)
            state = self._purges[domain] = DomainPurges(
                number=generation,
                cleared=generation,
                prefix=f"{domain} {generation} ",
                budget=self.purge_budget,
            )
        return state

    def _purge_urls(
        self, state: DomainPurges, domain: str, purge: Purge, now: float
    ) -> tuple[int, int]:
        """Drop (hard) or expire (soft) every variant of each URL, for both schemes, now:
        O(items)."""
        prefix = f"{domain} {self._generations.get(domain, 0)} "
        entries = size = 0
        for target in itertools.chain.from_iterable(map(scheme_targets, purge.items)):
            key = prefix + target
            stored = self._index.get(key)
            if stored is not None and state.top:
                stored = self._settled(state, key, target, stored)  # already purged lazily?
            if stored is None:
                continue
            variants = variants_of(stored)
            entries += len(variants)
            size += sum(v.size for v in variants)
            if not purge.soft:
                self._drop(key)
                continue
            expired = [soft_expired(v, now) for v in variants]
            for variant in expired:
                variant.set_mark(state.number)
            grown = sum(v.size for v in expired) - sum(v.size for v in variants)
            self._account(self._bucket_of(key), 0, grown)
            self._index[key] = new = expired[0] if len(expired) == 1 else expired
            self._resized(key, new)
        return entries, size

    async def _dry_run(self, domain: str, purge: Purge) -> tuple[int, int, tuple[str, ...]]:
        """What the purge would cover now (purging.dry_count): URLs are looked up (O(items));
        other kinds walk the domain's keys (O(entries)), a snapshot of its key list
        (``Bucket.snapshot``): entries stored or dropped during the walk are not counted."""
        state = self._purges.get(domain)
        prefix = f"{domain} {self._generations.get(domain, 0)} "
        bucket = self._buckets.get((domain, self._generations.get(domain, 0)))
        if purge.kind == "url":
            targets = itertools.chain.from_iterable(map(scheme_targets, purge.items))
            keys: Iterable[Key] = [prefix + target for target in targets]
        else:
            keys = () if bucket is None else bucket.snapshot()
        return await dry_count(keys, self._held, prefix=prefix, state=state, purge=purge)

    def _held(self, key: Key) -> Sequence[StoredResponse]:
        stored = self._index.get(key)
        return () if stored is None else variants_of(stored)

    def items(self) -> list[tuple[CacheKey, Stored]]:
        """What is stored, in the eviction queue's order (oldest first: not the order of
        eviction, which the visited bits decide), without marking anything visited (for tests
        and diagnostics: a copy of the whole index)."""
        return [(parse_key(key), self._index[key]) for key in self._policy]

    def held(self, key: CacheKey) -> Stored | None:
        """What is stored under the key, whatever its generation, without marking it visited
        (for tests and diagnostics)."""
        return self._index.get(joined_key(key))

    # -- internals ------------------------------------------------------------------------------

    def _account(self, bucket: Bucket, entries: int, size: int) -> None:
        bucket.entries += entries
        bucket.bytes += size
        self._entries += entries
        self._bytes += size

    def _bucket_of(self, key: Key) -> Bucket:
        domain, generation, _ = parse_key(key)
        return self._buckets[(domain, generation)]

    def _drop(self, key: Key) -> int:
        """Drop the key, from the policy too: how many variants it held (0: not stored)."""
        stored = self._index.pop(key, None)
        if stored is None:
            return 0
        self._policy.remove(key)
        variants = variants_of(stored)
        domain, generation, _ = parse_key(key)
        bucket = self._buckets[(domain, generation)]
        bucket.live -= 1  # still listed: see Bucket
        if generation != self._generations.get(domain, 0):
            self._doomed.pending -= 1
        self._account(bucket, -len(variants), -sum(v.size for v in variants))
        return len(variants)

    def _resized(self, key: Key, stored: Stored) -> bool:
        """Tell the policy the key's variants changed size (a variant dropped, a soft purge's
        copy), drop what it evicts for that; whether the key itself is still stored."""
        size = sum(v.size for v in variants_of(stored))
        for victim in self._policy.resize(key, size):
            self._evictions += self._drop(victim)
        return key in self._index
