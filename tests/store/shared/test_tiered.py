"""The two-tier store (proxy/store/tiered.py) over a real shared tier on a real directory:
what each tier answers, what a put writes where, and that a purge is durable in the shared
tier before it returns (a second process's tier sees it), or stops the tier when it cannot be.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from proxy.core.cache.entry import StoredResponse
from proxy.core.purge.purges import Purge
from proxy.edge import respond
from proxy.store.memory import MemoryStore
from proxy.store.shared import SharedTier
from proxy.store.shared.large import file_backed
from proxy.store.tiered import TieredStore

DOMAIN = "example.com"


def response(body: bytes, tags: tuple[str, ...] = ()) -> StoredResponse:
    return StoredResponse(
        status=200,
        reason="OK",
        headers=(("Content-Type", "text/plain"),),
        body=body,
        birth=1_000_000.0,
        freshness_lifetime=3600.0,
        tags=tags,
    )


def two_tiers(tier: SharedTier, memory_bytes: int = 1 << 20) -> TieredStore:
    return TieredStore(MemoryStore(max_bytes=memory_bytes), tier)


async def store(tiered: TieredStore, target: str, body: bytes, tags: tuple[str, ...] = ()) -> None:
    found = await tiered.lookup(DOMAIN, target)
    assert not found.variants
    assert await tiered.put(found.key, response(body, tags))


async def test_a_fill_lands_in_both_tiers_and_another_process_memory_reads_it_from_disk(
    tier: SharedTier,
) -> None:
    first = two_tiers(tier)
    await store(first, "/a", b"A" * 100)
    assert first.peek(DOMAIN, "/a") is not None  # the memory tier, for the fast path
    other = two_tiers(tier)  # another process's memory tier, empty, over the same tier
    assert other.peek(DOMAIN, "/a") is None
    found = await other.lookup(DOMAIN, "/a")
    assert (found.tier, [v.body for v in found.variants]) == ("disk", [b"A" * 100])
    assert other.hits["disk"] == 1
    hit = other.peek(DOMAIN, "/a")  # copied into its memory tier: hot from now on
    assert hit is not None and hit.body == b"A" * 100
    found = await other.lookup(DOMAIN, "/a")
    assert found.tier is None and other.hits == {"memory": 1, "disk": 1}


async def test_a_disk_hit_keeps_its_hit_lines_so_its_memory_copy_takes_the_fast_path(
    tier: SharedTier,
) -> None:
    # As the edge stores it: with the lines a fresh hit sends (respond.prepared).
    headers = (("Content-Type", "text/plain"), ("Date", "Thu, 26 Nov 2026 07:00:00 GMT"))
    entry = respond.prepared(
        StoredResponse(
            status=200,
            reason="OK",
            headers=headers,
            body=b"L" * 1024,
            birth=1_000_000.0,
            freshness_lifetime=3600.0,
            key_size=4,
            tags=("t1",),
        ),
        via="1.1 cdn-proxy",
        status="cdn-proxy; hit",
    )
    assert entry.hit_lines
    first = two_tiers(tier)
    found = await first.lookup(DOMAIN, "/l")
    assert await first.put(found.key, entry)
    other = two_tiers(tier)  # another worker's empty memory tier over the same shared tier
    found = await other.lookup(DOMAIN, "/l")
    assert found.tier == "disk"
    hot = other.peek(DOMAIN, "/l")  # what the edge's fast path serves from now on
    assert hot is not None
    assert hot.hit_lines == entry.hit_lines  # the same bytes, Cache-Status of a memory hit
    assert (hot.body, hot.birth, hot.freshness_lifetime) == (entry.body, 1_000_000.0, 3600.0)
    assert (hot.headers, hot.tags, hot.key_size, hot.size) == (headers, ("t1",), 4, entry.size)
    assert hot.fresh_age(1_000_010.0) == 10.0  # Age counts from the fill's birth


async def test_an_entry_without_hit_lines_comes_back_with_its_fields_and_rare_settings(
    tier: SharedTier,
) -> None:
    entry = StoredResponse(
        status=200,
        reason="OK",
        headers=(("Content-Type", "text/plain"), ("Vary", "Accept")),
        body=b"V",
        birth=1_000_000.0,
        freshness_lifetime=60.0,
        vary=("accept",),
        vary_values=("text/html",),
        revalidate_always=True,
        stale_if_error=5.0,
    )
    first = two_tiers(tier)
    found = await first.lookup(DOMAIN, "/v")
    assert await first.put(found.key, entry)
    (back,) = (await two_tiers(tier).lookup(DOMAIN, "/v")).variants
    assert back.hit_lines == ()
    assert (back.headers, back.vary, back.vary_values) == (
        entry.headers,
        ("accept",),
        ("text/html",),
    )
    assert (back.revalidate_always, back.stale_if_error, back.body) == (True, 5.0, b"V")


async def test_the_memory_tier_keeps_only_objects_up_to_an_eighth_of_its_size(
    tier: SharedTier,
) -> None:
    tiered = two_tiers(tier, memory_bytes=8192)
    await store(tiered, "/big", b"B" * 2000)  # over 1 KiB: the disk tier only
    assert tiered.peek(DOMAIN, "/big") is None
    for _ in range(2):
        found = await tiered.lookup(DOMAIN, "/big")
        assert found.tier == "disk" and found.variants[0].body == b"B" * 2000


async def test_a_large_body_goes_to_a_file_and_comes_back_whole(tier: SharedTier) -> None:
    tiered = two_tiers(tier, memory_bytes=1 << 20)
    body = bytes(range(256)) * 1024  # 256 KiB: over the inline limit, and over 1/8 of memory
    await store(tiered, "/file", body)
    found = await two_tiers(tier).lookup(DOMAIN, "/file")
    # Larger than the memory tier's share: not read at lookup, but sent from its file
    # (decision 0039), which reads back whole and checked.
    (entry,) = found.variants
    file = file_backed(entry)
    assert found.tier == "disk" and entry.body == b"" and file is not None
    assert b"".join(piece for batch in file.read(0, file.length) for piece in batch) == body


async def test_a_put_without_its_lookup_is_not_written_to_the_shared_tier(
    tier: SharedTier,
) -> None:
    tiered = two_tiers(tier)
    key = (await tiered.memory.lookup(DOMAIN, "/x")).key  # the memory tier's lookup only
    assert await tiered.put(key, response(b"x"))
    assert not (await two_tiers(tier).lookup(DOMAIN, "/x")).variants


@pytest.mark.parametrize(
    ("purge", "gone", "kept"),
    [
        (None, ["/p/a", "/p/b", "/q"], []),  # a clear
        (Purge("url", ("/p/a",)), ["/p/a"], ["/p/b", "/q"]),
        (Purge("prefix", ("/p/",)), ["/p/a", "/p/b"], ["/q"]),
        (Purge("tag", ("t",)), ["/p/b"], ["/p/a", "/q"]),
        (Purge("all"), ["/p/a", "/p/b", "/q"], []),
    ],
)
async def test_a_purge_is_in_the_shared_tier_when_it_returns(
    tier: SharedTier, purge: Purge | None, gone: list[str], kept: list[str]
) -> None:
    tiered = two_tiers(tier)
    for target in ("/p/a", "/p/b", "/q"):
        await store(tiered, target, target.encode(), ("t",) if target == "/p/b" else ())
    if purge is None:
        await tiered.clear_domain(DOMAIN)
    else:
        await tiered.purge(DOMAIN, purge)
    other = two_tiers(tier)  # what any other process of the node now finds
    assert [t for t in gone + kept if (await other.lookup(DOMAIN, t)).variants] == kept
    assert [t for t in gone + kept if tiered.peek(DOMAIN, t) is not None] == kept


async def test_the_synchronous_purges_are_durable_too(tier: SharedTier) -> None:
    tiered = two_tiers(tier)
    await store(tiered, "/a", b"a")
    tiered.purge_now(DOMAIN, Purge("url", ("/a",)))
    assert not (await two_tiers(tier).lookup(DOMAIN, "/a")).variants
    await store(tiered, "/a", b"a2")
    tiered.clear_now(DOMAIN)
    assert not (await two_tiers(tier).lookup(DOMAIN, "/a")).variants


async def test_a_purge_that_cannot_be_made_durable_stops_the_tier(
    tier: SharedTier, tmp_path: Path
) -> None:
    tiered = two_tiers(tier)
    await store(tiered, "/a", b"a")
    shutil.rmtree(tmp_path / "cache")  # the directory is gone: the purge is not durable
    await tiered.purge(DOMAIN, Purge("url", ("/b",)))
    assert tiered.not_durable == 1
    assert tiered.tier.status().stuck
    assert tiered.peek(DOMAIN, "/a") is not None  # the memory tier still serves what is true
    assert not (await two_tiers(tier).lookup(DOMAIN, "/a")).variants  # the tier: nothing


@pytest.mark.slow
async def test_the_trace_reads_the_shared_tier_without_filling_memory_or_counting(
    tier: SharedTier,
) -> None:
    """A process whose memory tier is empty (after a restart) traces what the shared tier
    holds, as its next lookup would find it, and the trace changes nothing: no copy into
    memory, no hit counted."""
    await store(two_tiers(tier), "/t", b"T" * 100, tags=("t1",))
    fresh = two_tiers(tier)
    held = fresh.inspect(DOMAIN, "/t")
    assert [v.body for v in held.variants] == [b"T" * 100]
    assert fresh.peek(DOMAIN, "/t") is None and fresh.hits == {"memory": 0, "disk": 0}
    assert fresh.inspect(DOMAIN, "/none").variants == ()
    await fresh.purge(DOMAIN, Purge(kind="tag", items=("t1",)))
    assert fresh.inspect(DOMAIN, "/t").variants == ()
