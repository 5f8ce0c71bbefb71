"""The fleet's purge rules (proxy/core/purge/fleet.py, core/lease.py; decision 0026): hints
with a kind, the order a batch is applied in, what a sync applies, and the record format."""

from __future__ import annotations

import pytest

from proxy.core.lease import Applied, ClearHint, SyncResult, plan_hints, plan_sync
from proxy.core.purge.fleet import (
    Figures,
    PurgeRecord,
    PurgeStep,
    merge_dry_answers,
    purge_receipt,
)
from proxy.core.purge.purges import MAX_SAMPLE, Purge, PurgeResult, purge_request

APPLIED = Applied(epoch="e", seq=10, generations={"a": 5, "b": 0})


def test_a_batch_applies_clears_first_and_drops_the_purges_before_them() -> None:
    """purge(a) 11, clear(a) 12, purge(a) 13, purge(b) 14: clear a, then purge 13 and 14;
    purge 11 is covered by the clear made now. Not one of the member's domains: skipped."""
    hints = [
        ClearHint("e", 10, 11, "a", "url"),
        ClearHint("e", 11, 12, "a"),
        ClearHint("e", 12, 13, "a", "tag"),
        ClearHint("e", 13, 14, "b", "prefix"),
        ClearHint("e", 14, 15, "other", "prefix"),
    ]
    plan = plan_hints(APPLIED, hints)
    assert plan is not None
    assert plan.clear == ("a",)
    assert [(s.number, s.domain) for s in plan.purges] == [(13, "a"), (14, "b")]
    assert (plan.applied.seq, plan.ack) == (15, True)


def test_a_purge_hint_after_a_gap_means_a_sync() -> None:
    assert plan_hints(APPLIED, [ClearHint("e", 11, 12, "a", "url")]) is None


def record(number: int, domain: str, kind: str = "url") -> PurgeRecord:
    items = () if kind == "all" else ("/x",)
    return PurgeRecord(number, domain, purge_request(kind, items, soft=kind == "all"))


def test_a_sync_applies_the_records_above_the_applied_number_in_order() -> None:
    result = SyncResult(
        "e", 14, {"a": 5, "b": 0}, purges=(record(13, "b"), record(11, "a"), record(9, "a"))
    )
    plan = plan_sync(APPLIED, result)
    assert plan.clear == ()
    assert [s.number for s in plan.purges] == [11, 13]  # 9 was applied already
    assert all(s.record is not None for s in plan.purges)


def test_a_sync_clears_a_domain_whose_records_are_gone_or_whose_generation_moved() -> None:
    result = SyncResult(
        "e",
        20,
        {"a": 5, "b": 18},
        purges=(record(12, "a"), record(19, "b")),
        floors={"a": 11},  # the record numbered 11 was dropped: a missed it
    )
    plan = plan_sync(APPLIED, result)
    assert plan.clear == ("a", "b")
    assert plan.purges == ()  # both domains are cleared now: no record is needed


def test_a_floor_below_what_the_member_applied_needs_nothing() -> None:
    plan = plan_sync(APPLIED, SyncResult("e", 12, {"a": 5, "b": 0}, floors={"a": 10}))
    assert plan.clear == ()


def test_a_new_epoch_clears_everything_and_needs_no_record() -> None:
    plan = plan_sync(APPLIED, SyncResult("f", 3, {"a": 0, "b": 0}, purges=(record(2, "a"),)))
    assert plan.clear_all and plan.purges == ()


@pytest.mark.parametrize("purge", [purge_request("url", ["/x"]), purge_request("all")])
def test_a_record_matches_only_the_step_its_hint_announced(purge: Purge) -> None:
    assert PurgeStep(123, "a.test", purge.kind).matches(PurgeRecord(123, "a.test", purge))
    assert not PurgeStep(123, "b.test", purge.kind).matches(PurgeRecord(123, "a.test", purge))
    assert not PurgeStep(124, "a.test", purge.kind).matches(PurgeRecord(123, "a.test", purge))


@pytest.mark.parametrize(
    ("figures", "acked", "entries", "exact", "reported"),
    [
        (Figures(3, 30, 300, 0), 3, 30, True, 3),
        (Figures(2, 30, 300, 0), 3, 30, False, 2),  # one member sent no figures
        (Figures(3, 30, 300, 1), 3, 30, False, 3),  # one reported a bound
        (None, 3, 0, False, 0),  # not known (Valkey stopped answering)
    ],
)
def test_a_fleet_purges_receipt_sums_the_figures_acked_with_it(
    figures: Figures | None, acked: int, entries: int, exact: bool, reported: int
) -> None:
    purge = purge_request("tag", ["t"])
    receipt = purge_receipt(
        "a.test", purge, number=9, generation=4, figures=figures, acked=acked, live=4, seconds=0.5
    )
    assert (receipt.entries, receipt.exact, receipt.reported) == (entries, exact, reported)
    assert (receipt.kind, receipt.items, receipt.dry_run, receipt.number) == (
        "tag",
        ("t",),
        False,
        9,
    )
    assert (receipt.generation, receipt.acked, receipt.live, receipt.seconds) == (4, acked, 4, 0.5)


def dry(member: str, entries: int, sample: tuple[str, ...], exact: bool = True) -> PurgeResult:
    return PurgeResult(
        "a.test", "prefix", ("/p/",), False, True, 7, 3, entries, 10 * entries, exact, 0.1,
        sample, answered_by=member,
    )  # fmt: skip


def test_a_dry_run_sums_the_caches_of_every_member_that_answered() -> None:
    purge = purge_request("prefix", ["/p/"], dry_run=True)
    answers = [dry("m1", 2, ("/p/a", "/p/b")), dry("m2", 1, ("/p/b",)), dry("m3", 0, ())]
    merged = merge_dry_answers("a.test", purge, answers, live=3)
    assert (merged.entries, merged.bytes, merged.exact) == (3, 30, True)
    assert (merged.live, merged.reported, merged.acked, merged.answered_by) == (3, 3, None, None)
    assert merged.sample == ("/p/a", "/p/b")  # each target once, in the order they came
    assert (merged.kind, merged.items, merged.dry_run) == ("prefix", ("/p/",), True)


def test_a_dry_run_some_members_did_not_answer_is_not_exact() -> None:
    purge = purge_request("prefix", ["/p/"], dry_run=True)
    merged = merge_dry_answers("a.test", purge, [dry("m1", 2, ())], live=2)
    assert (merged.entries, merged.exact, merged.live, merged.reported) == (2, False, 2, 1)
    inexact = merge_dry_answers("a.test", purge, [dry("m1", 2, (), exact=False)], live=1)
    assert not inexact.exact


def test_a_dry_runs_sample_stays_within_its_limit() -> None:
    purge = purge_request("prefix", ["/p/"], dry_run=True)
    answers = [
        dry(f"m{i}", MAX_SAMPLE, tuple(f"/p/{i}/{j}" for j in range(MAX_SAMPLE))) for i in range(3)
    ]
    merged = merge_dry_answers("a.test", purge, answers, live=3)
    assert merged.sample == answers[0].sample
    assert merged.entries == 3 * MAX_SAMPLE
