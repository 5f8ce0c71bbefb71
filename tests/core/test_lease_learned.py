"""A domain a member takes on after it has applied purges of the epoch (decision 0052): its
purges up to then were never applied by the member, so its next sync clears it, numbered as
of the sync, before anything else of it is written; until then no hint moves the member on."""

from __future__ import annotations

from proxy.core.lease import (
    NOTHING_APPLIED,
    Applied,
    ClearHint,
    SyncResult,
    for_domains,
    plan_hints,
    plan_sync,
)
from proxy.core.purge.fleet import PurgeRecord
from proxy.core.purge.purges import purge_request

URL = purge_request("url", ["/a"])


def test_a_domain_added_after_purges_of_the_epoch_is_learned() -> None:
    applied = Applied("e1", 40, {"a.test": 7})
    added = for_domains(applied, ("a.test", "b.test"))
    assert added == Applied("e1", 40, {"a.test": 7, "b.test": 0}, frozenset({"b.test"}))
    # Removed and added again: learned again.
    assert for_domains(for_domains(added, ("a.test",)), ("a.test", "b.test")).learned == {"b.test"}
    # Nothing could have been missed: before the first sync, at an epoch's beginning.
    assert for_domains(NOTHING_APPLIED, ("b.test",)).learned == frozenset()
    assert for_domains(Applied("e1", 0, {}), ("b.test",)).learned == frozenset()
    # A renewal that changes nothing keeps the very object (the tier's record is not rewritten).
    assert for_domains(added, ("a.test", "b.test")) is added


def test_a_sync_with_nothing_new_clears_the_learned_domain() -> None:
    applied = for_domains(Applied("e1", 40, {"a.test": 7}), ("a.test", "b.test"))
    plan = plan_sync(applied, SyncResult("e1", 40, None))
    assert (plan.clear, plan.learned, plan.unknown, plan.ack) == (
        ("b.test",),
        ("b.test",),
        (),
        False,
    )
    assert plan.applied == Applied("e1", 40, {"a.test": 7, "b.test": 0})


def test_a_sync_with_news_clears_the_learned_domain_and_drops_its_purges() -> None:
    applied = for_domains(Applied("e1", 40, {"a.test": 7}), ("a.test", "b.test"))
    records = (PurgeRecord(45, "b.test", URL), PurgeRecord(46, "a.test", URL))
    result = SyncResult("e1", 46, {"a.test": 7, "b.test": 0}, purges=records)
    plan = plan_sync(applied, result)
    # Cleared though its generation did not move, and not merely distrusted: what the member
    # missed of it is a clear's worth, not unknown records.
    assert (plan.clear, plan.learned, plan.unknown) == (("b.test",), ("b.test",), ())
    assert [step.domain for step in plan.purges] == ["a.test"]  # b.test's purge: cleared
    assert plan.applied == Applied("e1", 46, {"a.test": 7, "b.test": 0})


def test_a_learned_domain_sends_the_member_to_a_sync_before_any_hint() -> None:
    applied = for_domains(Applied("e1", 40, {"a.test": 7}), ("a.test", "b.test"))
    hint = ClearHint("e1", previous=40, number=41, domain="a.test")
    assert plan_hints(applied, [hint]) is None
    known = Applied("e1", 40, {"a.test": 7, "b.test": 0})
    assert plan_hints(known, [hint]) is not None


def test_a_new_epoch_clears_everything_and_forgets_what_was_learned() -> None:
    applied = for_domains(Applied("e1", 40, {"a.test": 7}), ("a.test", "b.test"))
    plan = plan_sync(applied, SyncResult("e2", 3, {"a.test": 0, "b.test": 0}))
    assert plan.clear_all and plan.learned == ()
    assert plan.applied.learned == frozenset()
