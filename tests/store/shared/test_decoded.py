"""Records the fast path has decoded, kept with their bytes (store/shared/decoded.py, decision
0056): a record read again unchanged is not checked and decoded again, and one whose bytes
changed in any way (a new fill, a rewrite, bits flipped on disk under the readers) is checked
afresh, so a corrupt record is still never served, and a purge still holds.

A real tier on a real directory.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.core.purge.purges import Purge
from proxy.store.shared import SharedTier
from proxy.store.shared.decoded import OVERHEAD, Decoded
from proxy.store.shared.records import unpack_hit
from tests.store.shared.test_faults import flip
from tests.store.shared.test_peek import DOMAIN, entry, raw_record, rewrite, store, tiers

MARKER = b"a body to find in the map, " * 40  # over 1 KiB, inline


async def test_a_record_read_again_unchanged_is_not_decoded_again(tier: SharedTier) -> None:
    await store(tiers(tier), "/a", entry(MARKER))
    first = tier.peek(DOMAIN, "/a")
    assert first is not None and first.body == MARKER
    again = tier.peek(DOMAIN, "/a")
    assert again is first  # the hit decoded the first time, not a new decoding of it


async def test_a_new_fill_of_the_url_is_read_not_the_record_decoded_before(
    tier: SharedTier,
) -> None:
    filler = tiers(tier)
    await store(filler, "/a", entry(MARKER))
    assert tier.peek(DOMAIN, "/a") is not None
    await store(tiers(tier), "/a", entry(b"newer"))  # another worker's fill of the URL
    hit = tier.peek(DOMAIN, "/a")
    assert hit is not None and hit.body == b"newer"


async def test_a_record_rewritten_with_a_flipped_bit_after_its_decoding_is_a_miss(
    tier: SharedTier,
) -> None:
    await store(tiers(tier), "/a", entry(MARKER))
    assert tier.peek(DOMAIN, "/a") is not None
    record = bytearray(raw_record(tier, "/a"))
    record[-10] ^= 0x01
    rewrite(tier, "/a", bytes(record))
    assert tier.peek(DOMAIN, "/a") is None
    assert tier.status().corrupt == 1
    assert not tier.lookup(DOMAIN, "/a").variants


async def test_bits_flipped_on_disk_under_a_reader_after_its_decoding_are_a_miss(
    tmp_path: Path,
) -> None:
    """No transaction at all: the bytes change in the map the reader reads (a disk's bit rot,
    another program's write), after this process decoded and kept the record."""
    tier = SharedTier.open_node(tmp_path, max_bytes=1 << 20)
    try:
        await store(tiers(tier), "/a", entry(MARKER))
        kept = tier.peek(DOMAIN, "/a")
        assert kept is not None and tier.peek(DOMAIN, "/a") is kept
        data = tmp_path / "entries" / "data.mdb"
        content = data.read_bytes()
        offset = content.find(MARKER)
        assert offset >= 0
        while offset >= 0:  # every copy (LMDB copies pages on write)
            flip(data, offset + 100)
            offset = content.find(MARKER, offset + 1)
        assert tier.peek(DOMAIN, "/a") is None
        assert tier.status().corrupt == 1
        assert not tier.lookup(DOMAIN, "/a").variants
    finally:
        tier.close()


@pytest.mark.parametrize(
    "purge",
    [Purge("url", ("/a",)), Purge("prefix", ("/",)), Purge("tag", ("t",))],
    ids=lambda p: p.kind,
)
async def test_a_purge_holds_for_a_record_decoded_before_it(tier: SharedTier, purge: Purge) -> None:
    filler, reader = tiers(tier), tiers(tier)
    await store(filler, "/a", entry(MARKER, tags=("t",)))
    kept = reader.peek_shared(DOMAIN, "/a")
    assert kept is not None and reader.peek_shared(DOMAIN, "/a") is kept
    assert await filler.purge(DOMAIN, purge) is not None  # another worker's purge
    assert reader.peek_shared(DOMAIN, "/a") is None
    assert not tier.lookup(DOMAIN, "/a").variants


async def test_what_is_kept_is_bounded_and_the_oldest_goes_first(tier: SharedTier) -> None:
    await store(tiers(tier), "/a", entry(MARKER))
    record = raw_record(tier, "/a")
    flags, _, sequence, _, hit = unpack_hit(record)
    cost = 2 * len(record) + OVERHEAD
    kept = Decoded(max_bytes=3 * cost)
    for key in (b"1", b"2", b"3"):
        kept.keep(key, record, flags, sequence, hit)
    assert list(kept) == [b"1", b"2", b"3"] and kept.bytes == 3 * cost
    kept.keep(b"2", record, flags, sequence, hit)  # a key kept again replaces its record
    assert list(kept) == [b"1", b"3", b"2"] and kept.bytes == 3 * cost
    kept.keep(b"4", record, flags, sequence, hit)
    assert list(kept) == [b"3", b"2", b"4"] and kept.bytes == 3 * cost
    small = Decoded(max_bytes=cost - 1)
    small.keep(b"5", record, flags, sequence, hit)  # larger than the bound: not kept
    assert not small and small.bytes == 0
