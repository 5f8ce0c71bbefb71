"""A stale entry in one process's memory tier and the node's shared tier (proxy/store/tiered.py,
``_behind_stale``): what another worker refreshed or refilled answers instead, and the entry a
revalidation refreshes reaches the shared tier only when the shared tier still holds that very
fill, uncovered by any purge.

Each TieredStore stands for one worker: its own memory tier over the one shared tier.
"""

from __future__ import annotations

import pytest

from proxy.core.cache.entry import StoredResponse
from proxy.core.purge.purges import Purge
from proxy.store.memory import MemoryStore
from proxy.store.shared import SharedTier
from proxy.store.tiered import TOKENS_MAX, TieredStore

DOMAIN = "example.com"
BORN = 1_000_000.0
LATER = BORN + 100.0  # the clock the tests run at: an entry born at BORN, 60 s fresh, is stale


def entry(body: bytes, *, birth: float = BORN, lifetime: float = 60.0) -> StoredResponse:
    return StoredResponse(
        status=200,
        reason="OK",
        headers=(("ETag", '"v1"'),),
        body=body,
        birth=birth,
        freshness_lifetime=lifetime,
    )


def worker(tier: SharedTier) -> TieredStore:
    return TieredStore(MemoryStore(max_bytes=1 << 20), tier, clock=lambda: LATER)


async def filled(store: TieredStore, body: bytes) -> StoredResponse:
    """A miss and its fill of /a, in both tiers."""
    found = await store.lookup(DOMAIN, "/a")
    assert not found.variants
    assert await store.put(found.key, entry(body))
    found = await store.lookup(DOMAIN, "/a")
    [stale] = found.variants
    assert not stale.is_fresh(LATER) and found.tier is None  # the memory tier's, stale
    return stale


async def test_a_fresh_entry_another_worker_stored_answers_instead_of_a_stale_one(
    tier: SharedTier,
) -> None:
    first, second = worker(tier), worker(tier)
    await filled(first, b"old")
    # The other worker revalidated it: its refreshed entry is in the shared tier.
    found = await second.lookup(DOMAIN, "/a")
    assert [v.body for v in found.variants] == [b"old"] and found.tier == "disk"
    assert await second.put(found.key, entry(b"old", birth=LATER - 1))
    found = await first.lookup(DOMAIN, "/a")
    assert found.tier == "disk"
    assert [(v.body, v.is_fresh(LATER)) for v in found.variants] == [(b"old", True)]
    # And kept in the first worker's memory tier: a memory hit from now on.
    again = await first.lookup(DOMAIN, "/a")
    assert again.tier is None and again.variants[0].is_fresh(LATER)


async def test_a_refresh_of_a_fill_the_shared_tier_holds_is_stored_there_for_every_worker(
    tier: SharedTier,
) -> None:
    first = worker(tier)
    stale = await filled(first, b"body")
    found = await first.lookup(DOMAIN, "/a")  # the revalidation's lookup
    assert list(found.variants) == [stale]
    assert await first.put(found.key, entry(b"body", birth=LATER - 1))  # a 304 refreshed it
    other = await worker(tier).lookup(DOMAIN, "/a")
    assert other.tier == "disk"
    assert [(v.body, v.is_fresh(LATER)) for v in other.variants] == [(b"body", True)]


@pytest.mark.slow
async def test_a_refresh_of_a_purged_fill_never_reaches_the_shared_tier(tier: SharedTier) -> None:
    """The first worker's memory tier still holds the entry when another worker's purge is
    already in the shared tier (a purge reaches the tiers one after the other): the refresh
    of that entry must not be stored where every worker would serve it."""
    first, second = worker(tier), worker(tier)
    await filled(first, b"purged")
    for n in range(TOKENS_MAX):  # the fill's own lookup forgotten: only this one may vouch
        await first.lookup(DOMAIN, f"/other/{n}")
    await second.purge(DOMAIN, Purge("url", ("/a",)))
    found = await first.lookup(DOMAIN, "/a")
    assert [v.body for v in found.variants] == [b"purged"]  # its own memory tier, not purged
    await first.put(found.key, entry(b"purged", birth=LATER - 1))
    assert not (await worker(tier).lookup(DOMAIN, "/a")).variants
