"""The shared tier's purge state within its byte budget (decisions 0037 and 0030): a purge
flood on one domain folds that domain into a clear, durably, in the purge's own commit."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from proxy.core.purge.purges import Purge
from proxy.store.shared import Fill, SharedTier
from tests.store.shared.actor import body, fill, response

BUDGET = 64 * 1024
FLOODED = "a.test"
OTHER = "b.test"


def open_tier(directory: Path) -> SharedTier:
    return SharedTier.open_node(directory, max_bytes=64 << 20, purge_max_bytes=BUDGET)


@pytest.fixture
def small(tmp_path: Path) -> Iterator[SharedTier]:
    opened = open_tier(tmp_path / "cache")
    yield opened
    opened.close()


def flood(tier: SharedTier, rounds: int, start: int = 0) -> None:
    """URL purges of 16 distinct 300-character paths each, on the flooded domain; the
    purge state is within the budget after every one of them."""
    for n in range(start, start + rounds):
        urls = tuple(f"/flood/{n}/{i}/" + "x" * 300 for i in range(16))
        assert tier.purge(FLOODED, Purge("url", urls)) is not None
        assert tier.stats().purge_state_bytes <= BUDGET


def record_bytes(tier: SharedTier, domain: str) -> int:
    """The domain's purge state: its record and its live URL log (decision 0048)."""
    return tier.purges.current(domain).held


def hit(tier: SharedTier, domain: str, target: str) -> bytes | None:
    variants = tier.lookup(domain, target).variants
    return tier.read_all(variants[0]) if variants else None


@pytest.mark.slow
def test_a_url_purge_flood_keeps_the_record_within_the_budget(small: SharedTier) -> None:
    flood(small, 200)  # about 1 MB of URL purges, 16 times the budget
    stats = small.stats()
    assert stats.purge_state_max_bytes == BUDGET
    assert 0 < stats.purge_state_bytes <= BUDGET
    assert stats.purge_folds >= 10  # folded again and again, each time to 7/8
    assert record_bytes(small, FLOODED) <= BUDGET
    assert stats.purge_state_bytes == record_bytes(small, FLOODED)  # the gauge counts it


def test_without_a_fold_the_record_grows_past_the_budget(tmp_path: Path) -> None:
    """The same flood under a budget it never reaches: the record holds every URL purge."""
    tier = SharedTier.open_node(tmp_path, max_bytes=64 << 20, purge_max_bytes=1 << 30)
    try:
        flood_unbounded = [f"/flood/{i}/" + "x" * 300 for i in range(16 * 40)]
        for n in range(40):
            assert tier.purge(FLOODED, Purge("url", tuple(flood_unbounded[16 * n : 16 * n + 16])))
        assert record_bytes(tier, FLOODED) > 2 * BUDGET
        assert tier.stats().purge_folds == 0
    finally:
        tier.close()


def test_entries_the_folded_bans_covered_stay_gone_also_after_a_restart(tmp_path: Path) -> None:
    directory = tmp_path / "cache"
    tier = open_tier(directory)
    try:
        for n in range(4):
            assert fill(tier, FLOODED, f"/p{n}", body(n, 2000))
            assert fill(tier, OTHER, f"/p{n}", body(10 + n, 2000))
        assert tier.purge(FLOODED, Purge("url", ("/p0", "/p1")))
        assert tier.purge(FLOODED, Purge("prefix", ("/p2",)))
        assert tier.purge(OTHER, Purge("url", ("/p0",)))  # another domain: under its share
        other_record = tier.purges.current(OTHER).to_bytes()
        assert hit(tier, FLOODED, "/p3") == body(3, 2000)
        flood(tier, 60)
        assert tier.stats().purge_folds >= 1
        for n in range(3):  # the folded bans covered them: never served again
            assert hit(tier, FLOODED, f"/p{n}") is None
        assert hit(tier, FLOODED, "/p3") is None  # the clear drops more, never less
        assert tier.purges.current(OTHER).to_bytes() == other_record  # not folded
        assert hit(tier, OTHER, "/p0") is None  # its own purge still holds
        for n in range(1, 4):
            assert hit(tier, OTHER, f"/p{n}") == body(10 + n, 2000)
        assert fill(tier, FLOODED, "/p0", body(20, 2000))  # stored after the fold: served
    finally:
        tier.close()
    reopened = open_tier(directory)
    try:
        assert hit(reopened, FLOODED, "/p0") == body(20, 2000)
        for n in range(1, 4):
            assert hit(reopened, FLOODED, f"/p{n}") is None
        assert hit(reopened, OTHER, "/p0") is None
        for n in range(1, 4):
            assert hit(reopened, OTHER, f"/p{n}") == body(10 + n, 2000)
        assert 0 < reopened.stats().purge_state_bytes <= BUDGET  # the count is durable too
    finally:
        reopened.close()


def test_a_fill_in_flight_across_the_fold_is_not_served(small: SharedTier) -> None:
    """A fill that looked up before the purge that covers it, committed after that purge
    was folded into a clear, is still judged covered."""
    token = small.lookup(FLOODED, "/late").token
    writer = Fill(small, FLOODED, "/late", response(), token)
    writer.append(body(5, 1000))
    assert small.purge(FLOODED, Purge("url", ("/late",)))
    flood(small, 60)
    assert small.stats().purge_folds >= 1
    writer.commit()
    assert hit(small, FLOODED, "/late") is None
