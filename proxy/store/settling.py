"""The lazy-purge walker (decision 0024): MemoryStore.settle walks each domain's bucket in
slices, checking every listed key against the domain's outstanding lazy purges; a walk
through the whole bucket retires the purges it started after (purging.py)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from proxy.store.entries import Bucket, Key, Stored
from proxy.store.purging import DomainPurges, Walk, listed_key
from proxy.store.reclaim import RECLAIM_CHECK

Settle = Callable[[DomainPurges, Key, str, Stored], object]


def settle(
    purges: Mapping[str, DomainPurges],
    bucket_of: Callable[[str], Bucket | None],
    index: Mapping[Key, Stored],
    settled: Settle,
    budget: int,
    seconds: float | None,
) -> int:
    """Check at most ``budget`` listed keys (``settled`` on each still stored), and stop once
    ``seconds`` have passed; return how many were visited. ``bucket_of``: a domain's bucket of
    its current generation."""
    deadline = None if seconds is None else time.perf_counter() + seconds
    visited = 0
    for domain, state in purges.items():
        walk = state.walk
        if walk is None:
            continue
        bucket = bucket_of(domain)
        if bucket is not None and bucket.relists != walk.relists:
            walk.index, walk.relists = 0, bucket.relists  # compacted: start again
        visited, done = _walk(state, walk, bucket, index, settled, visited, budget, deadline)
        if not done:
            return visited
        state.retire(walk.upto)
        state.walk = Walk(upto=state.number) if state.top else None
        if bucket is not None and state.walk is not None:
            state.walk.relists = bucket.relists
    return visited


def _walk(
    state: DomainPurges,
    walk: Walk,
    bucket: Bucket | None,
    index: Mapping[Key, Stored],
    settled: Settle,
    visited: int,
    budget: int,
    deadline: float | None,
) -> tuple[int, bool]:
    """The walk on through one domain's bucket from ``walk.index``: the count visited so far,
    and whether it reached the bucket's end (else the budget or the deadline stopped it)."""
    while bucket is not None:
        key = listed_key(bucket.sealed, bucket.keys, walk.index)
        if key is None:
            break
        if visited >= budget or (
            deadline is not None
            and visited % RECLAIM_CHECK == RECLAIM_CHECK - 1
            and time.perf_counter() > deadline
        ):
            return visited, False
        walk.index += 1
        visited += 1
        stored = index.get(key)
        if stored is not None:
            settled(state, key, key.split(" ", 2)[2], stored)
    return visited, True
