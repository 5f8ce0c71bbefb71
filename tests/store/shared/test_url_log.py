"""URL purges as an append-only log beside the domain's record (decision 0048): a purge
writes one small record whatever the number before it, a reader reads on from where it
stopped, a clear leaves the log behind to be swept, and a directory of the first layout (or
code of the first layout on a directory of the second) never serves what a purge covers."""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core.purge.purges import Purge, purge_request
from proxy.store.shared import SharedTier, url_log
from proxy.store.shared.purge_state import DomainState, _read_state
from proxy.store.shared.records import pack_number, read_number
from tests.store.shared.actor import body, fill

DOMAIN = "news.test"


def hit(tier: SharedTier, target: str) -> bytes | None:
    variants = tier.lookup(DOMAIN, target).variants
    return tier.read_all(variants[0]) if variants else None


def record(tier: SharedTier) -> bytes:
    with tier._state_env.begin() as txn:
        found = txn.get(DOMAIN.encode())
        assert found is not None
        return bytes(found)


def log_records(tier: SharedTier, domain: str = DOMAIN) -> int:
    prefix = url_log.LOG + domain.encode() + b"\x00"
    with tier._state_env.begin() as txn:
        cursor = txn.cursor()
        if not cursor.set_range(prefix):
            return 0
        return sum(1 for key in cursor.iternext(values=False) if bytes(key).startswith(prefix))


def test_a_url_purge_writes_a_record_of_its_own_and_the_domain_record_stays_small(
    tier: SharedTier,
) -> None:
    assert tier.purge(DOMAIN, Purge("url", ("/first",)))
    small = len(record(tier))
    tier.purges.add_many(DOMAIN, [Purge("url", (f"/a/{n}",)) for n in range(2000)], 0.0)
    assert tier.purge(DOMAIN, Purge("url", ("/last",)))
    assert len(record(tier)) <= small + 16  # its numbers' digits: nothing per URL purge
    assert log_records(tier) == 2002
    assert tier.stats().purge_state_bytes == tier.purges.current(DOMAIN).held


def test_a_reader_reads_on_from_where_it_stopped(tier: SharedTier) -> None:
    for n in range(3):
        assert fill(tier, DOMAIN, f"/p{n}", body(n, 500), birth=time.time())
    assert tier.purge(DOMAIN, Purge("url", ("/p0",)))
    before = tier.purges.current(DOMAIN)
    assert tier.purge(DOMAIN, Purge("url", ("/p1",), soft=True))
    after = tier.purges.current(DOMAIN)
    assert after.urls is before.urls  # the same table, grown by the one new record
    assert set(after.urls) == {"/p0", "/p1"}
    assert hit(tier, "/p0") is None
    assert tier.lookup(DOMAIN, "/p1").variants[0].response.freshness_lifetime < 3600.0
    assert hit(tier, "/p2") == body(2, 500)
    assert tier.clear_domain(DOMAIN)
    cleared = tier.purges.current(DOMAIN)
    assert cleared.urls is not before.urls and not cleared.urls  # a clear starts anew


def test_a_clear_drops_the_log_from_the_budget_at_once_and_from_disk_by_later_writes(
    tier: SharedTier,
) -> None:
    tier.purges.add_many(DOMAIN, [Purge("url", (f"/a/{n}",)) for n in range(1500)], 0.0)
    assert tier.stats().purge_state_bytes > 1500 * 20
    assert tier.clear_domain(DOMAIN)
    assert tier.stats().purge_state_bytes == len(record(tier))
    assert log_records(tier) > 0  # buried, not yet swept (the clear's write swept some)
    for n in range(3):
        assert tier.purge("other.test", Purge("url", (f"/o{n}",)))
    assert log_records(tier) == 0
    with tier._state_env.begin() as txn:
        assert url_log.dead_records(txn) == 0


def test_purges_in_the_log_hold_across_a_reopen(tmp_path: Path) -> None:
    tier = SharedTier.open_node(tmp_path / "cache", max_bytes=64 << 20)
    try:
        assert fill(tier, DOMAIN, "/p0", body(0, 500))
        assert fill(tier, DOMAIN, "/p1", body(1, 500))
        assert tier.purge(DOMAIN, Purge("url", ("/p0",)))
    finally:
        tier.close()
    reopened = SharedTier.open_node(tmp_path / "cache", max_bytes=64 << 20)
    try:
        assert hit(reopened, "/p0") is None
        assert hit(reopened, "/p1") == body(1, 500)
    finally:
        reopened.close()


def first_layout(number: int, cleared: int, urls: list[list[object]]) -> bytes:
    """A domain record as the first layout wrote it: one JSON value, URL purges inline."""
    body_ = [cleared, number, [], [], urls]
    return pack_number(number, json.dumps(body_, separators=(",", ":")).encode())


def test_a_directory_of_the_first_layout_is_read_and_migrated(tmp_path: Path) -> None:
    tier = SharedTier.open_node(tmp_path / "cache", max_bytes=64 << 20)
    try:
        assert fill(tier, DOMAIN, "/old", body(0, 500))
        assert fill(tier, DOMAIN, "/kept", body(1, 500))
        mark = tier.lookup(DOMAIN, "/old").token
        with tier._state_env.begin(write=True) as txn:  # as the first layout's purge wrote it
            txn.put(DOMAIN.encode(), first_layout(mark + 1, 0, [["/old", mark + 1, 0, 0.0]]))
    finally:
        tier.close()
    reopened = SharedTier.open_node(tmp_path / "cache", max_bytes=64 << 20)
    try:
        assert hit(reopened, "/old") is None
        assert hit(reopened, "/kept") == body(1, 500)
        assert reopened.purge(DOMAIN, Purge("url", ("/kept",)))  # written: migrated
        assert log_records(reopened) == 2
        assert json.loads(record(reopened)[8:])[4] == []  # no URL purge inline any more
        assert hit(reopened, "/old") is None
        assert hit(reopened, "/kept") is None
    finally:
        reopened.close()


def test_code_of_the_first_layout_reads_the_log_it_cannot_see_as_a_clear(
    tier: SharedTier,
) -> None:
    """What the first layout's reader makes of a record of the second (a downgrade): its
    ``cleared`` is at least the newest URL purge's number, so every entry a URL purge in
    the log covers is gone to it; the bans it can see stay bans."""
    assert tier.purge(DOMAIN, Purge("prefix", ("/news/",)))
    assert tier.purge(DOMAIN, Purge("url", ("/a",)))
    newest = tier.purge(DOMAIN, Purge("url", ("/b",), soft=True))
    assert newest is not None
    value = record(tier)
    cleared, _top, bans, _tags, urls, *rest = json.loads(value[8:])  # the first layout's read
    assert cleared >= newest and urls == [] and int(rest[0]) == 0
    assert [prefix for prefix, *_ in bans] == ["/news/"] and read_number(value) == newest
    assert DomainState.from_bytes(value).cleared == 0  # this layout's own, unchanged


def test_a_fold_buries_the_log(tmp_path: Path) -> None:
    tier = SharedTier.open_node(tmp_path / "cache", max_bytes=64 << 20, purge_max_bytes=32_768)
    try:
        for n in range(100):
            assert tier.purge(
                DOMAIN, Purge("url", tuple(f"/f/{n}/{i}/" + "x" * 100 for i in range(4)))
            )
            assert tier.stats().purge_state_bytes <= 32_768
        assert tier.stats().purge_folds >= 1
        assert log_records(tier) < 60  # the folded records were swept
    finally:
        tier.close()


def test_the_log_keys_sort_by_number() -> None:
    keys = [url_log.log_key(DOMAIN, n) for n in (1, 255, 256, 70_000, 1 << 40)]
    assert keys == sorted(keys)


STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("url"), st.sampled_from(["/a", "/b", "/c", "/d"]), st.booleans()),
        st.tuples(st.just("prefix"), st.sampled_from(["/a", "/"]), st.booleans()),
        st.tuples(st.just("clear"), st.just(""), st.just(False)),
    ),
    min_size=1,
    max_size=10,
)


@settings(max_examples=25, deadline=None)
@given(steps=STEPS)
def test_a_reader_that_reads_on_sees_what_a_fresh_reader_sees(
    steps: list[tuple[str, str, bool]],
) -> None:
    """After every purge, the state a process built by reading on from where it stopped is
    the state read from scratch: the same URL purges, numbers and floors."""
    with tempfile.TemporaryDirectory() as directory:
        tier = SharedTier.open_node(Path(directory) / "cache", max_bytes=64 << 20)
        try:
            tier.purges.current(DOMAIN)
            for kind, item, soft in steps:
                if kind == "clear":
                    assert tier.clear_domain(DOMAIN)
                else:
                    assert tier.purge(DOMAIN, purge_request(kind, [item], soft=soft), at=1.0)
                kept = tier.purges.current(DOMAIN)
                with tier._state_env.begin() as txn:
                    fresh = _read_state(txn, DOMAIN)
                assert kept.urls == fresh.urls
                assert (kept.number, kept.cleared, kept.top) == (
                    fresh.number,
                    fresh.cleared,
                    fresh.top,
                )
                assert kept.bans.by_prefix == fresh.bans.by_prefix
        finally:
            tier.close()
