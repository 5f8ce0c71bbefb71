"""URL purge records retire (issue 31 item 3, decision 0059): once older than the keep, what
they cover is removed, fills from before them are refused by a floor, and the records leave
the purge state, its budget and every process's URL table.

The windows a retirement must close are held still as in test_skipped_writes.py: a real
worker process (``actor.py``) purges or retires, and this process, which parsed the domain's
state before, has the stamp written back to what it read, as a worker sees it for a moment
before the writer's announcement.
"""

from __future__ import annotations

import time

from proxy.core.cache.keys import cache_target
from proxy.core.purge.purges import Purge, purge_request
from proxy.store.shared import Fill, SharedTier, url_log
from proxy.store.shared.purge_state import REBUILD_SLACK
from proxy.store.shared.retire import retire
from tests.store.shared.actor import body, fill, response
from tests.store.shared.conftest import body_files, run_actor
from tests.store.shared.test_skipped_writes import announce, announced, served_fresh
from tests.store.shared.test_url_log import log_records

DOMAIN = "example.com"
LATER = time.time() + 3600  # a cutoff every record is older than


def _log_records(tier: SharedTier) -> int:
    return log_records(tier, DOMAIN)


def test_retired_records_leave_the_log_the_budget_and_the_table(tier: SharedTier) -> None:
    assert fill(tier, DOMAIN, "/keep", b"k", birth=time.time())
    for index in range(50):
        assert tier.purge(DOMAIN, purge_request("url", [f"/p{index}"])) is not None
    grown, _, _ = tier.purges.usage()
    assert grown > 50 * 20
    assert len(tier.purges.current(DOMAIN).urls) == 50
    assert _log_records(tier) == 50
    assert retire(tier, time.time() - 3600) == 0  # none is that old: all kept
    assert retire(tier, LATER) == 50
    assert _log_records(tier) == 0
    after, _, retired = tier.purges.usage()
    state = tier.purges.current(DOMAIN)
    assert state.log_bytes == 0
    assert after == state.held < 100  # the domain's small record alone
    assert retired == 50 == tier.stats().retired_urls
    assert state.refuse == state.retired == state.url_top and state.log_targets == 0
    assert len(state.urls) == 50  # read on: a new table only past the slack (below)
    tier.purges.parsed.clear()  # a process that reads the domain for the first time
    assert tier.purges.current(DOMAIN).urls == {}
    assert served_fresh_at(tier, "/keep")  # what no purge covered stays
    assert retire(tier, LATER) == 0


def served_fresh_at(tier: SharedTier, target: str) -> bool:
    now = time.time()
    return any(entry.response.is_fresh(now) for entry in tier.lookup(DOMAIN, target).variants)


def test_only_records_older_than_the_cutoff_retire(tier: SharedTier) -> None:
    assert tier.purge(DOMAIN, purge_request("url", ["/old"]), at=1_000.0) is not None
    assert tier.purge(DOMAIN, purge_request("url", ["/new"]), at=2_000.0) is not None
    assert retire(tier, 1_500.0) == 1
    tier.purges.parsed.clear()
    assert set(tier.purges.current(DOMAIN).urls) == {"/new"}
    assert _log_records(tier) == 1


def test_a_pass_is_bounded_and_the_next_goes_on(tier: SharedTier) -> None:
    for index in range(10):
        targets = [f"/r{index}/{item}" for item in range(3)]
        assert tier.purge(DOMAIN, purge_request("url", targets)) is not None
    assert retire(tier, LATER, limit=7) == 6  # whole records only: two of three URLs each
    assert retire(tier, LATER, limit=7) == 6
    assert _log_records(tier) == 6
    assert tier.purges.current(DOMAIN).log_targets == 18
    while retire(tier, LATER, limit=7):
        pass
    assert _log_records(tier) == 0 and tier.purges.current(DOMAIN).log_targets == 0


def test_a_soft_purges_stale_variants_go_when_it_retires(tier: SharedTier) -> None:
    """Its record is what makes them stale: without it they would be fresh again."""
    for https in (False, True):
        assert fill(tier, DOMAIN, cache_target("/a", https), b"a", birth=time.time())
    assert tier.purge(DOMAIN, purge_request("url", ["/a"], soft=True)) is not None
    assert tier.stats().entries == 2 and not served_fresh_at(tier, "/a")
    assert retire(tier, LATER) == 1
    assert tier.stats().entries == 0
    assert tier.lookup(DOMAIN, "/a").variants == ()
    assert tier.lookup(DOMAIN, cache_target("/a", True)).variants == ()


def test_a_clear_between_the_steps_keeps_the_budget_true(tier: SharedTier) -> None:
    for index in range(5):
        assert tier.purge(DOMAIN, purge_request("url", [f"/c{index}"])) is not None
    dues = tier.purges.due(LATER, 100)
    tier.purges.refuse(dues)
    assert tier.clear_domain(DOMAIN) is not None  # buries the records
    assert tier.purges.retire(dues) == 0  # gone with the clear already: nothing counted twice
    total, _, _ = tier.purges.usage()
    record = tier.purges.current(DOMAIN)
    assert record.log_bytes == 0 and total == record.held


def test_an_entry_committed_before_the_purge_showed_goes_with_its_record(
    tier: SharedTier,
) -> None:
    """A fill that passed its check by a state parsed before a hard URL purge commits after
    the purge's removal of the URL's variants: the record judges it a miss; when the record
    retires, the entry must go with it, or it would be served again."""
    assert fill(tier, DOMAIN, "/a", b"a", birth=time.time())
    token = tier.lookup(DOMAIN, "/a").token  # this process parsed the state: a fill begins
    writer = Fill(tier, DOMAIN, "/a", response(birth=time.time()), token)
    assert writer.append(b"late")
    before = announced(tier)
    assert run_actor("fleet", tier.directory, tier.instance, "e1", 1, DOMAIN, "url:hard:/a") == (
        "written 1"
    )
    purged = announced(tier)
    announce(tier, before)  # committed, not yet announced: this process's check passes
    assert writer.commit()
    announce(tier, purged)
    assert not served_fresh(tier)  # the record judges it
    assert run_actor("retire", tier.directory, tier.instance) == "retired 1"
    assert tier.stats().entries == 0
    assert not served_fresh(tier)
    assert tier.lookup(DOMAIN, "/a").variants == ()


def test_a_fill_from_before_a_retired_purge_is_refused_in_its_commit(tier: SharedTier) -> None:
    """The same fill, committed after the retirement with the state still parsed before the
    purge: only the floor, read inside its write transaction, refuses it."""
    assert fill(tier, DOMAIN, "/a", b"a", birth=time.time())
    token = tier.lookup(DOMAIN, "/a").token
    writer = Fill(tier, DOMAIN, "/a", response(birth=time.time()), token)
    assert writer.append(body(3, 100_000))  # in a file: nothing of it may be left
    before = announced(tier)
    assert run_actor("fleet", tier.directory, tier.instance, "e1", 1, DOMAIN, "url:hard:/a") == (
        "written 1"
    )
    assert run_actor("retire", tier.directory, tier.instance) == "retired 1"
    retired = announced(tier)
    announce(tier, before)
    assert not writer.commit()
    assert writer.refused
    assert tier.stats().entries == 0 and body_files(tier.bodies) == []
    announce(tier, retired)
    assert not served_fresh(tier)


def test_a_fill_that_began_after_the_purge_is_kept(tier: SharedTier) -> None:
    assert tier.purge(DOMAIN, purge_request("url", ["/a"])) is not None
    token = tier.lookup(DOMAIN, "/a").token
    assert retire(tier, LATER) == 1
    writer = Fill(tier, DOMAIN, "/a", response(birth=time.time()), token)
    assert writer.append(b"new")
    assert writer.commit()
    assert served_fresh(tier)


def test_a_table_of_mostly_retired_urls_is_read_anew(tier: SharedTier) -> None:
    """Past twice the live log's URLs plus the slack, a reader drops the retired ones."""
    count = REBUILD_SLACK + 100
    tier.purges.add_many(DOMAIN, [Purge("url", (f"/old/{n}",)) for n in range(count)], 1_000.0)
    assert tier.purge(DOMAIN, purge_request("url", ["/young"]), at=LATER + 1) is not None
    assert len(tier.purges.current(DOMAIN).urls) == count + 1
    while retire(tier, LATER):
        pass
    state = tier.purges.current(DOMAIN)
    assert state.log_targets == 1
    assert set(state.urls) == {"/young"}


def test_a_corrupt_log_record_is_a_fault_the_pass_survives(tier: SharedTier) -> None:
    """A record that does not parse (a torn or corrupted page of ``state/``) is a fault the
    pass reports, never raises: raised, it would end the node's retirement task for good.
    It and its domain's later records are kept (what it covers is unknown); the records
    before it, and other domains', retire."""
    other = "other.test"
    for target in ("/a", "/b", "/c"):
        assert tier.purge(DOMAIN, purge_request("url", [target])) is not None
    assert tier.purge(other, purge_request("url", ["/x"])) is not None
    number = tier.purges.current(DOMAIN).url_top - 1  # /b's record
    with tier._state_env.begin(write=True) as txn:  # the test breaks the record
        txn.put(url_log.log_key(DOMAIN, number), b"{not json")
    faults = tier.status().faults
    assert retire(tier, LATER) == 2  # /a, and other.test's /x
    assert tier.status().faults == faults + 1
    assert _log_records(tier) == 2  # /b (corrupt) and /c
    assert log_records(tier, other) == 0
    for value in (b"[1, 2]", b'[0, "x", []]', b"[0, 1.0, [3]]", b"null"):
        with tier._state_env.begin(write=True) as txn:
            txn.put(url_log.log_key(DOMAIN, number), value)
        assert retire(tier, LATER) == 0
    assert tier.status().faults == faults + 5


def test_a_corrupt_log_record_reads_as_a_clear_at_its_number(tier: SharedTier) -> None:
    """A reader that meets a record it cannot parse does not know what it purged: it reads it
    as a clear of the domain at its number (a colder cache, never a purged page served), reads
    the records after it as before, and never raises into a lookup."""
    assert fill(tier, DOMAIN, "/z", b"z", birth=time.time())  # stored before every purge
    assert tier.purge(DOMAIN, purge_request("url", ["/a"])) is not None
    assert tier.purge(DOMAIN, purge_request("url", ["/b"])) is not None
    assert fill(tier, DOMAIN, "/y", b"y", birth=time.time())  # after the record that breaks
    assert fill(tier, DOMAIN, "/c", b"c", birth=time.time())
    assert tier.purge(DOMAIN, purge_request("url", ["/c"], soft=True)) is not None
    broken = tier.purges.current(DOMAIN).url_top - 1  # /b's record
    with tier._state_env.begin(write=True) as txn:  # the test breaks the record
        txn.put(url_log.log_key(DOMAIN, broken), b"{not json")
    tier.purges.parsed.clear()  # a process that reads the domain now
    assert not served_fresh_at(tier, "/z")
    assert served_fresh_at(tier, "/y")
    assert not served_fresh_at(tier, "/c")  # the soft purge after it still holds
    assert tier.purges.current(DOMAIN).cleared == broken
