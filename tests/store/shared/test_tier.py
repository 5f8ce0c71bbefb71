"""The shared tier in one process: what is stored comes back whole, purges hold, size is bounded
(decision 0030)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import lmdb
import pytest

from proxy.core.cache.entry import StoredResponse
from proxy.core.cache.keys import scheme_targets
from proxy.core.purge.purges import purge_request
from proxy.store.shared import Admission, AsyncFill, Fill, OldestFirst, SharedTier
from proxy.store.shared.health import Health
from proxy.store.shared.records import read_header
from tests.store.shared.actor import body, fill, response
from tests.store.shared.conftest import body_files

DOMAIN = "example.com"


def stored(tier: SharedTier, target: str, data: bytes, chunk: int = 65536) -> bool:
    token = tier.lookup(DOMAIN, target).token
    writer = Fill(tier, DOMAIN, target, response(("t1", "t2")), token)
    for offset in range(0, len(data), chunk):
        assert writer.append(data[offset : offset + chunk])
    return writer.commit()


@pytest.mark.parametrize("size", [0, 1, 1024, 65536, 65537, 300_000, 3 * 65536])
def test_round_trip_of_every_size(tier: SharedTier, size: int) -> None:
    data = body(size, size)
    assert stored(tier, "/object", data, chunk=10_000)
    (entry,) = tier.lookup(DOMAIN, "/object").variants
    assert entry.length == size
    assert tier.read_all(entry) == data
    assert entry.response.status == 200
    assert entry.response.headers == response().headers
    assert entry.response.tags == ("t1", "t2")
    assert entry.response.freshness_lifetime == 3600.0
    assert (entry.path is None) == (size <= 65536)  # large bodies are files


def test_ranges_read_only_their_bytes(tier: SharedTier) -> None:
    data = body(7, 500_000)
    assert stored(tier, "/big", data)
    (entry,) = tier.lookup(DOMAIN, "/big").variants
    for start, end in [(0, 1), (65535, 65537), (100_000, 400_000), (499_999, None), (10, 10)]:
        assert b"".join(tier.read_body(entry, start, end)) == data[start:end]


def test_a_new_fill_replaces_the_old_and_frees_its_file(tier: SharedTier) -> None:
    assert stored(tier, "/big", body(1, 200_000))
    assert stored(tier, "/big", body(2, 300_000))
    (entry,) = tier.lookup(DOMAIN, "/big").variants
    assert tier.read_all(entry) == body(2, 300_000)
    assert body_files(tier.bodies) == [entry.path.name if entry.path else ""]
    stats = tier.stats()
    assert stats.entries == 1
    assert 300_000 < stats.bytes < 310_000  # counted in pages and blocks (pages.py), once


def test_vary_variants_are_kept_apart(tier: SharedTier) -> None:
    token = tier.lookup(DOMAIN, "/v").token
    for language in ("en", "fr"):
        variant = StoredResponse(
            status=200,
            reason="OK",
            headers=(("Vary", "Accept-Language"),),
            body=b"",
            birth=1.0,
            freshness_lifetime=10.0,
            vary=("accept-language",),
            vary_values=(language,),
        )
        writer = Fill(tier, DOMAIN, "/v", variant, token)
        writer.append(language.encode())
        assert writer.commit()
    variants = tier.lookup(DOMAIN, "/v").variants
    assert [v.response.body for v in variants] == [b"fr", b"en"]  # most recent first
    assert [v.response.vary_values for v in variants] == [("fr",), ("en",)]


def test_oldest_entries_go_first_when_over_size(tmp_path: Path) -> None:
    # 975,000 bytes usable (pages.usable_bytes): four of the bodies, not five
    tier = SharedTier.open_node(tmp_path, max_bytes=1_300_000, evictor=OldestFirst())
    try:
        for n in range(10):
            assert stored(tier, f"/{n}", body(n, 200_000))
        stats = tier.stats()
        assert stats.bytes <= tier.capacity
        assert stats.evictions == 10 - stats.entries
        assert stats.entries == 4
        present = [n for n in range(10) if tier.lookup(DOMAIN, f"/{n}").variants]
        assert present == [6, 7, 8, 9]
        assert len(body_files(tier.bodies)) == 4
    finally:
        tier.close()


class NewestFirst(OldestFirst):
    """A policy plugged in through the hook: the last stored goes first."""

    def admit(self, txn: lmdb.Transaction, key: bytes, sequence: int, cost: int) -> Admission:
        used = sum(
            len(k) + len(v) + read_header(v).body_length for k, v in txn.cursor(db=self.entries)
        )
        if used + cost <= self.capacity:
            return Admission(True, [])
        return Admission(False, [])

    def open(self, env: lmdb.Environment, directory: Path, capacity: int, health: Health) -> None:
        self.entries = env.open_db(b"entries")
        self.capacity = capacity


def test_an_eviction_policy_plugs_in(tmp_path: Path) -> None:
    tier = SharedTier.open_node(tmp_path, max_bytes=1_300_000, evictor=NewestFirst())
    try:
        for n in range(6):
            assert stored(tier, f"/{n}", body(n, 200_000)) == (n < 4)
        present = [n for n in range(6) if tier.lookup(DOMAIN, f"/{n}").variants]
        assert present == [0, 1, 2, 3]  # each fill past the bound was refused
        assert len(body_files(tier.bodies)) == 4
    finally:
        tier.close()


def test_a_body_larger_than_the_tier_is_dropped(tmp_path: Path) -> None:
    tier = SharedTier.open_node(tmp_path, max_bytes=100_000)
    try:
        writer = Fill(tier, DOMAIN, "/huge", response(), 0)
        assert writer.append(body(1, 90_000))
        assert not writer.append(body(2, 20_000))
        assert not writer.commit()
        assert tier.lookup(DOMAIN, "/huge").variants == ()
        assert body_files(tier.bodies) == []  # its temporary file is gone
    finally:
        tier.close()


def test_an_aborted_fill_leaves_nothing(tier: SharedTier) -> None:
    writer = Fill(tier, DOMAIN, "/a", response(), 0)
    writer.append(body(1, 200_000))
    writer.abort()
    assert not writer.commit()
    assert tier.lookup(DOMAIN, "/a").variants == ()
    assert body_files(tier.bodies) == []


# -- purges -------------------------------------------------------------------------------------


def test_clear_domain_makes_every_entry_unservable_and_leaves_other_domains(
    tier: SharedTier,
) -> None:
    assert stored(tier, "/a", b"a")
    assert fill(tier, "other.example", "/a", b"b")
    number = tier.clear_domain(DOMAIN)
    assert number == 1
    assert tier.lookup(DOMAIN, "/a").variants == ()
    assert tier.lookup(DOMAIN, "/a").token == 1
    assert [v.response.body for v in tier.lookup("other.example", "/a").variants] == [b"b"]


@pytest.mark.parametrize(
    ("kind", "items", "gone", "kept"),
    [
        ("url", ["/a/1"], ["/a/1"], ["/a/2", "/b"]),
        ("prefix", ["/a/"], ["/a/1", "/a/2"], ["/b"]),
        ("tag", ["t1"], ["/a/1", "/a/2", "/b"], []),
        ("tag", ["t9"], [], ["/a/1", "/a/2", "/b"]),
    ],
)
def test_hard_purges_cover_what_core_says(
    tier: SharedTier, kind: str, items: list[str], gone: list[str], kept: list[str]
) -> None:
    for target in ("/a/1", "/a/2", "/b"):
        assert stored(tier, target, target.encode())
    assert tier.purge(DOMAIN, purge_request(kind, items)) == 1
    for target in gone:
        assert tier.lookup(DOMAIN, target).variants == (), target
    for target in kept:
        assert [v.response.body for v in tier.lookup(DOMAIN, target).variants] == [target.encode()]


@pytest.mark.parametrize("kind, item", [("url", "/a"), ("prefix", "/a"), ("prefix", "/")])
def test_url_purges_and_prefix_bans_cover_both_schemes(
    tier: SharedTier, kind: str, item: str
) -> None:
    for target in scheme_targets("/a"):  # core.keys: the http and https key targets
        assert stored(tier, target, b"x")
    tier.purge(DOMAIN, purge_request(kind, [item]))
    for target in scheme_targets("/a"):
        assert tier.lookup(DOMAIN, target).variants == ()


def test_a_soft_purge_ends_freshness_at_its_time(tier: SharedTier) -> None:
    assert stored(tier, "/a", b"x")
    tier.purge(DOMAIN, purge_request("prefix", ["/"], soft=True), at=1_000_100.0)
    (entry,) = tier.lookup(DOMAIN, "/a").variants
    assert entry.response.freshness_lifetime == 100.0  # birth 1,000,000: stale from the purge
    assert entry.response.body == b"x"
    assert entry.response.mark == 0  # the number its lookup saw, before the purge (1)
    assert stored(tier, "/a", b"y")  # a fill after the purge is fresh again
    (entry,) = tier.lookup(DOMAIN, "/a").variants
    assert entry.response.freshness_lifetime == 3600.0


def test_a_fill_that_looked_up_before_a_purge_is_not_served(tier: SharedTier) -> None:
    token = tier.lookup(DOMAIN, "/a").token
    writer = Fill(tier, DOMAIN, "/a", response(("t1",)), token)
    writer.append(b"fetched before the purge")
    tier.purge(DOMAIN, purge_request("tag", ["t1"]))
    assert not writer.commit()
    assert tier.lookup(DOMAIN, "/a").variants == ()
    token = tier.lookup(DOMAIN, "/b").token
    writer = Fill(tier, DOMAIN, "/b", response(), token)
    writer.append(b"fetched before the clear")
    tier.clear_domain(DOMAIN)
    assert not writer.commit()
    assert tier.lookup(DOMAIN, "/b").variants == ()


def test_purged_entries_are_reclaimed_by_the_next_write(tier: SharedTier) -> None:
    assert stored(tier, "/a", body(1, 200_000))
    tier.purge(DOMAIN, purge_request("url", ["/a"]))
    assert tier.lookup(DOMAIN, "/a").variants == ()
    assert stored(tier, "/b", b"b")
    assert tier.stats().entries == 1
    assert body_files(tier.bodies) == []


# -- the event loop -----------------------------------------------------------------------------


async def test_async_fills_write_in_the_writer_thread(tier: SharedTier) -> None:
    seen: set[int] = set()
    original = os.write

    def spying_write(fd: int, data: bytes | memoryview) -> int:
        seen.add(threading.get_ident())
        return original(fd, data)

    data = body(3, 1_000_000)
    writer = AsyncFill(tier, DOMAIN, "/a", response(), tier.lookup(DOMAIN, "/a").token)
    os.write = spying_write  # type: ignore[assignment]
    try:
        for offset in range(0, len(data), 65536):
            assert await writer.append(data[offset : offset + 65536])
        assert await writer.commit()
    finally:
        os.write = original
    assert seen and threading.get_ident() not in seen
    (entry,) = tier.lookup(DOMAIN, "/a").variants
    assert tier.read_all(entry) == data


async def test_async_purges_are_durable_when_they_return(tmp_path: Path) -> None:
    tier = SharedTier.open_node(tmp_path, max_bytes=1 << 20)
    try:
        assert fill(tier, DOMAIN, "/a/1", b"1")
        assert fill(tier, DOMAIN, "/b", b"b")
        assert await tier.purge_async(DOMAIN, purge_request("prefix", ["/a/"])) == 1
        assert await tier.clear_domain_async("other.example") == 1
        assert tier.lookup(DOMAIN, "/a/1").variants == ()
        assert tier.lookup(DOMAIN, "/b").variants
    finally:
        tier.close()
    tier = SharedTier.open_node(tmp_path, max_bytes=1 << 20)
    try:
        assert tier.lookup(DOMAIN, "/a/1").variants == ()
        assert tier.lookup(DOMAIN, "/b").variants
        assert tier.lookup("other.example", "/").token == 1
    finally:
        tier.close()


@pytest.mark.slow
def test_commit_all_stores_a_batch_in_one_transaction_and_leaves_out_what_a_purge_covers(
    tier: SharedTier,
) -> None:
    """The bulk load (benchmarks.startup_million): every fill of the batch is stored but the
    one a tag purge since its lookup covers, and one whose body went to a file."""
    fills = []
    for n in range(50):
        target = f"/bulk/{n}"
        tags = ("gone",) if n == 7 else ()
        fills.append(Fill(tier, DOMAIN, target, response(tags), tier.lookup(DOMAIN, target).token))
        fills[-1].append(body(n, 100 + n))
    large = Fill(tier, DOMAIN, "/bulk/large", response(), tier.lookup(DOMAIN, "/bulk/large").token)
    large.append(body(99, 70_000))  # over INLINE_MAX: a body file, which commit_all leaves out
    tier.purge(DOMAIN, purge_request("tag", ["gone"]))
    assert Fill.commit_all(tier, [*fills, large]) == 49
    for n in range(50):
        found = tier.lookup(DOMAIN, f"/bulk/{n}").variants
        if n == 7:
            assert found == ()
        else:
            (entry,) = found
            assert entry.response.body == body(n, 100 + n)
    assert tier.lookup(DOMAIN, "/bulk/large").variants == ()
    assert list((tier.bodies / "tmp").iterdir()) == []  # the large fill's file is gone
