"""The shared tier's read for the edge's fast path (``SharedTier.peek``, ``TieredStore.peek_shared``
and ``keep``; issue 23, decision 0030 "Tier numbers"): a URL's one inline variant, judged
against the purges exactly as ``lookup`` judges it, or None and ``lookup`` answers.

A real tier on a real directory; two memory tiers over it stand for two workers of a node.
"""

from __future__ import annotations

import marshal
import time
import zlib

import pytest

from proxy.core.cache.entry import StoredResponse
from proxy.core.purge.purges import Purge
from proxy.edge import respond
from proxy.store.memory import MemoryStore
from proxy.store.shared import S3FifoEvictor, SharedTier
from proxy.store.shared.records import (
    FLAG_FILE,
    HEADER,
    MAGIC_EAGER,
    entry_prefix,
    unpack_entry,
    unpack_hit,
)
from proxy.store.tiered import TieredStore

DOMAIN = "example.com"
BIRTH = 1_000_000.0
HEADERS = (("Content-Type", "text/plain"), ("Date", "Thu, 26 Nov 2026 07:00:00 GMT"))


def entry(
    body: bytes = b"B" * 1024, *, tags: tuple[str, ...] = (), birth: float = BIRTH, **rare: object
) -> StoredResponse:
    """A response as the edge stores it: with the lines a fresh hit sends, when it may have
    them (``respond.prepared``)."""
    plain = StoredResponse(
        status=200,
        reason="OK",
        headers=HEADERS,
        body=body,
        birth=birth,
        freshness_lifetime=600.0,
        key_size=4,
        tags=tags,
        **rare,  # type: ignore[arg-type]
    )
    return respond.prepared(plain, via="filler", status="cdn-proxy; hit")


def tiers(tier: SharedTier, memory_bytes: int = 1 << 20) -> TieredStore:
    return TieredStore(MemoryStore(max_bytes=memory_bytes), tier)


async def store(tiered: TieredStore, target: str, response: StoredResponse) -> None:
    found = await tiered.lookup(DOMAIN, target)
    assert await tiered.put(found.key, response)


async def test_the_one_inline_variant_comes_back_with_its_lines_body_and_freshness(
    tier: SharedTier,
) -> None:
    stored = entry(tags=("t",))
    await store(tiers(tier), "/a", stored)
    hit = tier.peek(DOMAIN, "/a")
    assert hit is not None
    assert (hit.hit_lines, hit.body) == (stored.hit_lines, stored.body)
    assert (hit.birth, hit.freshness_lifetime) == (BIRTH, 600.0)
    response = hit.response()  # what lookup would have given, for the memory tier's copy
    assert response is not None
    assert (response.headers, response.tags, response.size) == (HEADERS, ("t",), stored.size)
    assert response.mark == hit.mark


@pytest.mark.parametrize("seconds", [-5.0, 0.0, 0.5, 599.0, 599.999, 600.0, 601.0, 1e9])
async def test_its_freshness_is_the_stored_responses_rule(tier: SharedTier, seconds: float) -> None:
    """RFC 9111 §4.2: ``SharedHit.fresh_age`` is ``StoredResponse.fresh_age`` on the same
    numbers (the fast path reads the first without building the second)."""
    stored = entry()
    await store(tiers(tier), "/a", stored)
    hit = tier.peek(DOMAIN, "/a")
    assert hit is not None
    assert hit.fresh_age(BIRTH + seconds) == stored.fresh_age(BIRTH + seconds)


async def test_lookup_answers_what_peek_leaves_to_it(tier: SharedTier) -> None:
    tiered = tiers(tier)
    assert tier.peek(DOMAIN, "/none") is None
    # Two variants of one URL (a response without Vary, then one with it): lookup chooses.
    await store(tiered, "/v", entry(b"plain"))
    await store(tiered, "/v", entry(b"varied", vary=("accept",), vary_values=("a/b",)))
    assert tier.peek(DOMAIN, "/v") is None
    assert len(tier.lookup(DOMAIN, "/v").variants) == 2
    # A body past the inline limit is in a file (lookup reads and checks it).
    await store(tiered, "/big", entry(b"x" * (1 << 17)))
    assert tier.peek(DOMAIN, "/big") is None
    assert tier.lookup(DOMAIN, "/big").variants[0].path is not None
    # A tier stopped (a purge it could not make durable) serves nothing, either way.
    await store(tiered, "/a", entry())
    tier.stop("test")
    assert tier.peek(DOMAIN, "/a") is None and not tier.lookup(DOMAIN, "/a").variants


HARD_PURGES = [
    Purge("url", ("/a",)),
    Purge("prefix", ("/",)),
    Purge("tag", ("t",)),
    Purge("all", ()),
]


@pytest.mark.parametrize("purge", HARD_PURGES, ids=lambda p: p.kind)
async def test_a_purged_variant_is_never_returned(tier: SharedTier, purge: Purge) -> None:
    filler = tiers(tier)
    await store(filler, "/a", entry(tags=("t",)))
    assert tier.peek(DOMAIN, "/a") is not None
    assert await filler.purge(DOMAIN, purge) is not None
    assert tier.peek(DOMAIN, "/a") is None
    assert not tier.lookup(DOMAIN, "/a").variants  # the same judgement


async def test_a_clear_and_a_soft_purge_leave_it_to_lookup(tier: SharedTier) -> None:
    filler = tiers(tier)
    now = time.time()
    await store(filler, "/a", entry(birth=now))
    await store(filler, "/b", entry(birth=now))
    assert tier.peek(DOMAIN, "/a") is not None
    await filler.purge(DOMAIN, Purge("url", ("/a",), soft=True))
    assert tier.peek(DOMAIN, "/a") is None  # stale from the purge: lookup's to revalidate
    (soft,) = tier.lookup(DOMAIN, "/a").variants
    assert soft.response.fresh_age(time.time()) is None
    assert tier.peek(DOMAIN, "/b") is not None  # a purge of another URL covers it not
    await filler.clear_domain(DOMAIN)
    assert tier.peek(DOMAIN, "/b") is None and not tier.lookup(DOMAIN, "/b").variants


async def test_a_purge_made_by_another_worker_holds_for_peek(tier: SharedTier) -> None:
    filler, reader = tiers(tier), tiers(tier)
    await store(filler, "/a", entry())
    assert reader.peek_shared(DOMAIN, "/a") is not None
    await filler.purge(DOMAIN, Purge("url", ("/a",)))  # the reader's memory never saw it
    assert reader.peek_shared(DOMAIN, "/a") is None


async def test_peek_shared_leaves_a_url_the_memory_tier_holds_to_lookup(tier: SharedTier) -> None:
    filler, reader = tiers(tier), tiers(tier)
    await store(filler, "/a", entry())
    await store(reader, "/a", entry(b"newer"))  # this worker holds its own copy
    assert reader.peek_shared(DOMAIN, "/a") is None
    assert reader.memory.holds(DOMAIN, "/a") and not filler.memory.holds(DOMAIN, "/b")


async def test_keep_copies_a_disk_hit_into_memory_relabelled_when_it_fits(
    tier: SharedTier,
) -> None:
    filler = tiers(tier)
    await store(filler, "/a", entry())
    reader = tiers(tier)
    seen: list[tuple[str, str]] = []

    def relabel(domain: str, target: str, response: StoredResponse) -> StoredResponse:
        seen.append((domain, target))
        return response.lean()

    reader.relabel = relabel
    hit = reader.peek_shared(DOMAIN, "/a")
    assert hit is not None
    await reader.keep(DOMAIN, "/a", hit)
    assert seen == [(DOMAIN, "/a")]
    kept = reader.peek(DOMAIN, "/a")  # the memory tier's own: the next hit is a memory hit
    assert kept is not None and kept.body == hit.body and kept.hit_lines == hit.hit_lines
    assert reader.peek_shared(DOMAIN, "/a") is None  # held in memory now
    small = tiers(tier, memory_bytes=4096)  # keeps objects up to 512 bytes: not this one
    hit = small.peek_shared(DOMAIN, "/a")
    assert hit is not None
    await small.keep(DOMAIN, "/a", hit)
    assert small.peek(DOMAIN, "/a") is None and small.peek_shared(DOMAIN, "/a") is not None


def raw_record(tier: SharedTier, target: str) -> bytes:
    with tier._env.begin(db=tier.db_entries) as txn:
        record = txn.get(entry_prefix(DOMAIN, target))
    assert record is not None
    return bytes(record)


def rewrite(tier: SharedTier, target: str, record: bytes) -> None:
    with tier._env.begin(write=True, db=tier.db_entries) as txn:
        txn.put(entry_prefix(DOMAIN, target), record)


async def test_a_corrupt_record_is_counted_and_never_returned(tier: SharedTier) -> None:
    await store(tiers(tier), "/a", entry())
    record = bytearray(raw_record(tier, "/a"))
    record[-1] ^= 0xFF  # a flipped bit in the body
    rewrite(tier, "/a", bytes(record))
    assert tier.peek(DOMAIN, "/a") is None
    assert tier.status().corrupt == 1
    assert not tier.lookup(DOMAIN, "/a").variants


def eager(record: bytes) -> bytes:
    """The record as the previous format wrote it: the rest of the metadata marshalled in
    place, not as bytes (magic b"CDN")."""
    _, flags, meta_length, length, mark, sequence, _, table_crc = HEADER.unpack_from(record)
    end = HEADER.size + meta_length
    parts = marshal.loads(record[HEADER.size : end])
    meta = marshal.dumps((*parts[:6], marshal.loads(parts[6])))
    inline = b"" if flags & FLAG_FILE else record[end:]
    crc = zlib.crc32(inline, zlib.crc32(meta))
    head = HEADER.pack(MAGIC_EAGER, flags, len(meta), length, mark, sequence, crc, table_crc)
    return head + meta + inline


async def test_records_of_the_previous_format_are_still_read(tier: SharedTier) -> None:
    stored = entry(tags=("t",))
    await store(tiers(tier), "/a", stored)
    record = raw_record(tier, "/a")
    old = eager(record)
    assert old != record and old[:3] == b"CDN"
    rewrite(tier, "/a", old)
    hit = tier.peek(DOMAIN, "/a")
    assert hit is not None and hit.hit_lines == stored.hit_lines and hit.body == stored.body
    (found,) = tier.lookup(DOMAIN, "/a").variants
    assert (found.response.headers, found.response.tags) == (HEADERS, ("t",))
    header, response = unpack_entry(old)
    assert response.hit_lines == stored.hit_lines and header.mark == hit.mark
    assert unpack_hit(record)[4].parts[6] != unpack_hit(old)[4].parts[6]  # bytes, tuple


async def test_a_fast_hit_raises_the_entrys_s3fifo_counter_as_lookup_does(
    tier: SharedTier,
) -> None:
    """Without it, entries served only by the fast path would look unused to S3-FIFO and be
    evicted before the ones lookup serves."""
    await store(tiers(tier), "/counted", entry())
    (held,) = tier.lookup(DOMAIN, "/counted").variants
    assert isinstance(tier.evictor, S3FifoEvictor) and tier.evictor.counters is not None
    before = tier.evictor.counters.get(held.sequence)
    assert tier.peek(DOMAIN, "/counted") is not None
    assert tier.evictor.counters.get(held.sequence) == before + 1
