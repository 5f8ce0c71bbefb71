"""The shared tier's capacity in pages (issue 31 item 2, decision 0041): filled with small
objects to many times its size, it keeps storing new ones, and its use of the disk (the
entries environment's file, which never shrinks, and the body files) stays within its size.
Before, it counted bytes of records while LMDB used whole pages: 1.3 KB objects took about
three times the size, and once the map was full no fill was ever stored again."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from proxy.store.shared import Fill, SharedTier, pages
from tests.store.shared.actor import body, response

DOMAIN = "example.com"


def stored(tier: SharedTier, target: str, data: bytes) -> bool:
    writer = Fill(tier, DOMAIN, target, response(), tier.lookup(DOMAIN, target).token)
    assert writer.append(data)
    return writer.commit()


def disk_use(directory: Path) -> int:
    """What the tier takes on disk: the entries environment's file and the body files."""
    files = [directory / "entries" / "data.mdb", *(directory / "bodies").glob("*.body")]
    return sum(os.stat(path).st_size for path in files)


def fill_many_times_over(tmp_path: Path, size: int, times: int, body_bytes: int) -> None:
    directory = tmp_path / "cache"
    tier = SharedTier.open_node(directory, max_bytes=size)
    try:
        count = times * size // body_bytes
        for n in range(count):
            assert stored(tier, f"/object/{n}", body(n, body_bytes)), n  # never refused
            if n % 500 == 0:
                assert disk_use(directory) <= size, n
        assert disk_use(directory) <= size
        stats = tier.stats()
        assert stats.bytes <= tier.capacity
        assert stats.evictions > count // 2
        (latest,) = tier.lookup(DOMAIN, f"/object/{count - 1}").variants
        assert tier.read_all(latest) == body(count - 1, body_bytes)
    finally:
        tier.close()


@pytest.mark.parametrize(("body_bytes", "times"), [(1_300, 4), (70_000, 10)])
def test_a_small_tier_filled_many_times_over_keeps_storing_within_its_size(
    tmp_path: Path, body_bytes: int, times: int
) -> None:
    fill_many_times_over(tmp_path, 2 << 20, times, body_bytes)


@pytest.mark.slow
@pytest.mark.parametrize("body_bytes", [300, 1_300, 3_000])
def test_a_small_tier_filled_ten_times_over_with_objects_of_each_size(
    tmp_path: Path, body_bytes: int
) -> None:
    fill_many_times_over(tmp_path, 2 << 20, 10, body_bytes)


@pytest.mark.slow
def test_a_larger_tier_filled_ten_times_over_with_small_objects(tmp_path: Path) -> None:
    fill_many_times_over(tmp_path, 8 << 20, 10, 1_300)


def test_a_map_filled_by_pages_a_reader_held_stores_again_once_it_lets_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The map is reserved far above the tier's size, so only pages a reader holds (freed
    pages LMDB may not reuse while a read transaction older than their freeing is open) can
    fill it: fills then fail with MDB_MAP_FULL (each evicts what it can, in a transaction of
    its own, and tries again). Once the reader lets go the tier stores again, within its
    size: it never stops for good. (A map of 4 MiB here, to get there quickly.)"""
    monkeypatch.setattr(pages, "map_size", lambda max_bytes: 4 << 20)
    directory = tmp_path / "cache"
    tier = SharedTier.open_node(directory, max_bytes=1 << 20)
    try:
        reader = tier._env.begin()  # a worker stopped inside a lookup
        failed = next(n for n in range(10_000) if not stored(tier, f"/a/{n}", body(n, 1_300)))
        assert failed > 10
        reader.abort()
        for n in range(3_000):
            assert stored(tier, f"/b/{n}", body(n, 1_300)), n
        assert tier.lookup(DOMAIN, "/b/2999").variants
        assert os.stat(directory / "entries" / "data.mdb").st_size <= 4 << 20
    finally:
        tier.close()


@pytest.mark.parametrize(
    ("budget", "expected"), [(64 << 20, 320 << 20), (1 << 30, (4 << 30) + (64 << 20))]
)
def test_the_purge_state_map_is_bounded_by_its_budget(budget: int, expected: int) -> None:
    """The state environment's map follows ``purge_state_max_bytes`` (it was fixed at 256
    MiB, whatever the budget): room for every record rewritten once, and slack."""
    assert pages.state_map_size(budget) == expected
