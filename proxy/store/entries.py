"""How the memory store (memory.py) holds its entries: a key as one string, a key's variants,
the buckets of keys by (domain, generation), and the entries taken out of the garbage
collector's reach. The module docstring of memory.py says why each is shaped so.
"""

from __future__ import annotations

import ctypes
import gc
import itertools
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace

from proxy.core.cache.entry import CacheKey, StoredResponse, holds_no_cycle
from proxy.core.purge.purges import HARD, covering, stale_lifetime
from proxy.store.purging import KEY_CHUNK, DomainPurges

# What ``_index`` holds for a key: one response, or several (never fewer than two) in a list.
Stored = StoredResponse | list[StoredResponse]
# A key as the store keeps it: f"{domain} {generation} {target}".
Key = str


def joined_key(key: CacheKey) -> Key:
    domain, generation, target = key
    return f"{domain} {generation} {target}"


def parse_key(key: Key) -> CacheKey:
    domain, generation, target = key.split(" ", 2)
    return (domain, int(generation), target)


def variants_of(stored: Stored) -> Sequence[StoredResponse]:
    return (stored,) if isinstance(stored, StoredResponse) else stored


def untracker() -> Callable[[StoredResponse], None]:
    """What ``put`` does to each entry it stores: on CPython, take it out of the garbage
    collector's reach with PyObject_GC_UnTrack (it is still freed by reference counting when
    dropped), but only when the collector tracks it and ``holds_no_cycle`` passes it: an entry
    that could be part of a cycle stays tracked, so the cycle is still freed. Elsewhere,
    nothing."""
    if sys.implementation.name != "cpython":
        return lambda _: None
    # pythonapi calls hold the GIL, so no collection runs while an object is untracked.
    untrack = ctypes.pythonapi.PyObject_GC_UnTrack
    untrack.argtypes = [ctypes.py_object]
    untrack.restype = None
    is_tracked = gc.is_tracked

    def untrack_entry(entry: StoredResponse) -> None:
        # is_tracked first: it is also False for an object without the collector's header,
        # which PyObject_GC_UnTrack would write through.
        if is_tracked(entry) and holds_no_cycle(entry):
            untrack(entry)

    return untrack_entry


untrack = untracker()


def soft_expired(entry: StoredResponse, stale_at: float) -> StoredResponse:
    """A copy of the entry whose freshness ends no later than ``stale_at`` (a soft purge):
    served again only after revalidation, or within stale-while-revalidate and stale-if-error
    counted from then. Its mark is the store's to set."""
    lifetime = stale_lifetime(entry.birth, entry.freshness_lifetime, stale_at)
    copy = replace(entry, freshness_lifetime=lifetime)
    untrack(copy)
    return copy


def settled(
    state: DomainPurges, target: str, stored: Stored
) -> tuple[Stored | None, int, int] | None:
    """What a key's variants become once the domain's outstanding lazy purges are applied to
    each variant stored before them: dropped when one covers it hard, its freshness ended at
    the purge's time when one covers it soft; each checked variant is marked, so it is
    checked once. None when nothing changes; else (what is left, None when nothing is; how
    many variants were dropped; the change in bytes)."""
    kept: list[StoredResponse] = []
    dropped = change = 0
    for variant in variants_of(stored):
        if variant.mark >= state.top:
            kept.append(variant)
            continue
        covered = covering(
            state.bans, state.tags, mark=variant.mark, target=target, tags=variant.tags
        )
        if covered is HARD:
            dropped += 1
            change -= variant.size
            continue
        if covered is not None:
            expired = soft_expired(variant, covered.stale_at)
            change += expired.size - variant.size  # none, usually
            variant = expired
        variant.set_mark(state.number)
        kept.append(variant)
    if not dropped and all(a is b for a, b in zip(kept, variants_of(stored), strict=True)):
        return None
    return (kept[0] if len(kept) == 1 else kept or None), dropped, change


@dataclass(slots=True)
class Bucket:
    """The keys of one (domain, generation), for the reclaim after a clear.

    A list, not a set: a slot costs 8 bytes, not 40 to 100. A key dropped by eviction or
    invalidation stays listed (finding it would cost a scan) and one stored again is listed
    again; the list is compacted to the live keys when it grows past twice their number, so
    it stays within about twice what a set would hold, at a fifth of the memory a key.
    The newest keys are in ``keys``; every KEY_CHUNK of them are sealed into a tuple in
    ``sealed``, which the garbage collector stops visiting (see the module docstring)."""

    keys: list[Key] = field(default_factory=list)
    sealed: list[tuple[Key, ...]] = field(default_factory=list)
    listed: int = 0  # keys in keys and sealed
    relists: int = 0  # compactions so far (the purge walker restarts after one)
    live: int = 0  # listed keys that are in the store
    entries: int = 0
    bytes: int = 0

    def add(self, key: Key) -> None:
        keys = self.keys
        keys.append(key)
        self.listed += 1
        if len(keys) >= KEY_CHUNK:
            self.sealed.append(tuple(keys))
            self.keys = []

    def pop(self) -> Key:
        """The newest listed key, unlisted. There must be one."""
        if not self.keys:
            self.keys = list(self.sealed.pop())
        self.listed -= 1
        return self.keys.pop()

    def all_keys(self) -> Iterator[Key]:
        return itertools.chain(itertools.chain.from_iterable(self.sealed), self.keys)

    def snapshot(self) -> Iterator[Key]:
        """The listed keys as they are now, for a walk across awaits: the sealed tuples never
        change, so only a pointer per KEY_CHUNK keys and the unsealed tail are copied."""
        return itertools.chain(itertools.chain.from_iterable(list(self.sealed)), tuple(self.keys))

    def relist(self, keys: list[Key]) -> None:
        self.sealed = [tuple(keys[i : i + KEY_CHUNK]) for i in range(0, len(keys), KEY_CHUNK)]
        self.keys = list(self.sealed.pop()) if self.sealed else []
        self.listed = len(keys)
        self.relists += 1
