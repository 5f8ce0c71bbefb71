"""The lease rules of 0014 (docs/decisions/0014-fleet-purge-protocol.md), with a fake clock."""

from __future__ import annotations

import pytest

from proxy.core.lease import (
    NOTHING_APPLIED,
    Applied,
    ClearHint,
    Done,
    FleetView,
    GiveUp,
    LiveMember,
    SyncPlan,
    SyncResult,
    Wait,
    hints_cover,
    lease_deadline,
    lease_margin,
    may_serve,
    pending_members,
    plan_hints,
    plan_sync,
    unreachable_retry_after,
    wait_decision,
)


@pytest.mark.parametrize(
    ("lease", "margin"),
    [(2.0, 0.2), (0.6, 0.1), (0.5, 0.1), (10.0, 1.0), (1.0, 0.1)],
)
def test_margin_is_a_tenth_of_the_lease_and_at_least_100ms(lease: float, margin: float) -> None:
    assert lease_margin(lease) == pytest.approx(margin)


@pytest.mark.parametrize(
    ("sent_at", "lease", "margin", "deadline"),
    [
        (100.0, 2.0, None, 101.8),
        (100.0, 0.6, None, 100.5),
        (0.0, 2.0, 0.5, 1.5),  # an explicit margin wins
    ],
)
def test_deadline_counts_from_the_send(
    sent_at: float, lease: float, margin: float | None, deadline: float
) -> None:
    """0014 Sync step 4: t0 + lease - margin, t0 taken before the sync was sent."""
    assert lease_deadline(sent_at, lease, margin) == pytest.approx(deadline)


def test_deadline_needs_a_positive_lease() -> None:
    with pytest.raises(ValueError):
        lease_deadline(0.0, 0.0)


@pytest.mark.parametrize(
    ("deadline", "now", "serves"),
    [(10.0, 9.999, True), (10.0, 10.0, False), (10.0, 11.0, False), (float("-inf"), 0.0, False)],
)
def test_serves_only_before_the_deadline(deadline: float, now: float, serves: bool) -> None:
    """0014 Fencing: checked per request against the clock; a member that never synced has a
    deadline of -inf and serves nothing."""
    assert may_serve(deadline, now) is serves


E1 = "e1"
APPLIED = Applied(epoch=E1, seq=100, generations={"a.test": 50, "b.test": 100})


@pytest.mark.parametrize(
    ("applied", "result", "plan"),
    [
        # Nothing new: same epoch, same number; nothing cleared, nothing to ack.
        (
            APPLIED,
            SyncResult(epoch=E1, seq=100, generations=None),
            SyncPlan(clear_all=False, clear=(), applied=APPLIED, ack=False),
        ),
        # A clear of a.test: only a.test is cleared locally.
        (
            APPLIED,
            SyncResult(epoch=E1, seq=120, generations={"a.test": 120, "b.test": 100}),
            SyncPlan(
                clear_all=False,
                clear=("a.test",),
                applied=Applied(E1, 120, {"a.test": 120, "b.test": 100}),
                ack=True,
            ),
        ),
        # Clears of other domains move seq only: nothing to clear here, but ack the number.
        (
            APPLIED,
            SyncResult(epoch=E1, seq=130, generations={"a.test": 50, "b.test": 100}),
            SyncPlan(
                clear_all=False, clear=(), applied=Applied(E1, 130, APPLIED.generations), ack=True
            ),
        ),
        # A generation that differs is cleared even if it is lower (never trust order).
        (
            APPLIED,
            SyncResult(epoch=E1, seq=140, generations={"a.test": 40, "b.test": 100}),
            SyncPlan(
                clear_all=False,
                clear=("a.test",),
                applied=Applied(E1, 140, {"a.test": 40, "b.test": 100}),
                ack=True,
            ),
        ),
        # A new epoch: data was lost, so everything goes, whatever the generations say.
        (
            APPLIED,
            SyncResult(epoch="e2", seq=999, generations={"a.test": 0, "b.test": 0}),
            SyncPlan(
                clear_all=True,
                clear=(),
                applied=Applied("e2", 999, {"a.test": 0, "b.test": 0}),
                ack=True,
            ),
        ),
        # The first sync of a process: adopts the epoch (its empty cache is cleared, O(1)).
        (
            NOTHING_APPLIED,
            SyncResult(epoch=E1, seq=5, generations={"a.test": 5}),
            SyncPlan(clear_all=True, clear=(), applied=Applied(E1, 5, {"a.test": 5}), ack=True),
        ),
    ],
)
def test_plan_sync(applied: Applied, result: SyncResult, plan: SyncPlan) -> None:
    """0014 Sync steps 1-3: epoch changed → clear all; changed generations → clear those."""
    assert plan_sync(applied, result) == plan


def view(
    *live: tuple[str, int, int], epoch: str = E1, born: int = 0, now: int = 10_000
) -> FleetView:
    members = tuple(LiveMember(member=m, expires_ms=exp, ack=ack) for m, exp, ack in live)
    return FleetView(epoch=epoch, born_ms=born, now_ms=now, live=members)


def test_pending_compares_acks_with_the_number_in_the_same_epoch() -> None:
    v = view(("a", 11_000, 500), ("b", 11_000, 499), ("c", 11_000, 0))
    assert [m.member for m in pending_members(500, E1, v)] == ["b", "c"]


def test_after_an_epoch_change_any_ack_means_the_cache_was_dropped() -> None:
    """An ack in a new epoch may be a smaller number than the clear's (a failover to a Valkey
    whose clock is behind): it still proves the member dropped everything."""
    v = view(("a", 11_000, 3), ("b", 11_000, 0), epoch="e2")
    assert [m.member for m in pending_members(500, E1, v)] == ["b"]


@pytest.mark.parametrize(
    ("fleet", "now", "decision"),
    [
        # Everyone acked, epoch old: done.
        (view(("a", 11_000, 500), ("b", 11_000, 600)), 1.0, Done(acked=2, live=2)),
        # No live member at all: done (nobody can serve from cache).
        (view(), 1.0, Done(acked=0, live=0)),
        # One pending: poll again.
        (
            view(("a", 11_000, 500), ("b", 11_000, 1)),
            1.0,
            Wait(acked=1, live=2, seconds=0.05, pending=("b",), threshold=500),
        ),
        # Pending, and the poll would pass the deadline: wait only until the deadline.
        (
            view(("b", 11_000, 1)),
            4.96875,
            Wait(acked=0, live=1, seconds=0.03125, pending=("b",), threshold=500),
        ),
        # The epoch changed since the clear: any ack counts (threshold 1).
        (
            view(("a", 11_000, 3), ("b", 11_000, 0), epoch="e2"),
            1.0,
            Wait(acked=1, live=2, seconds=0.05, pending=("b",), threshold=1),
        ),
        # Deadline reached with one pending: give up; retry once its lease has run out.
        (view(("a", 11_000, 500), ("b", 12_500, 1)), 5.0, GiveUp(acked=1, live=2, retry_after=3)),
        # All acked but the epoch is 0.5 s old: wait out the rest of the grace.
        (
            view(("a", 11_000, 500), born=9_500),
            1.0,
            Wait(acked=1, live=1, seconds=1.5, threshold=500),  # no one to hear from
        ),
        # ...and exactly at the end of the grace: done.
        (view(("a", 11_000, 500), born=8_000), 1.0, Done(acked=1, live=1)),
        # Grace not over at the deadline: give up, retry after the grace.
        (view(born=9_500), 5.0, GiveUp(acked=0, live=0, retry_after=2)),
        # Done wins over the deadline: the answer is true, so it is given.
        (view(("a", 11_000, 500)), 9.0, Done(acked=1, live=1)),
    ],
)
def test_wait_decision(fleet: FleetView, now: float, decision: object) -> None:
    """0014 Wait for the fleet: acks, the grace of a young epoch, and the deadline."""
    got = wait_decision(
        number=500,
        epoch_at_clear=E1,
        view=fleet,
        grace=2.0,
        poll_interval=0.05,
        now=now,
        deadline=5.0,
    )
    assert got == decision


def hint(previous: int, number: int, domain: str = "a.test", epoch: str = E1) -> ClearHint:
    return ClearHint(epoch=epoch, previous=previous, number=number, domain=domain)


@pytest.mark.parametrize(
    ("hints", "plan"),
    [
        # The next clear in the chain, of one of the member's domains: clear it, ack.
        (
            [hint(100, 120)],
            SyncPlan(
                clear_all=False,
                clear=("a.test",),
                applied=Applied(E1, 120, {"a.test": 120, "b.test": 100}),
                ack=True,
            ),
        ),
        # Several in a row, one of a domain the member does not serve: all applied, in order.
        (
            [hint(100, 120), hint(120, 130, "other.test"), hint(130, 140, "b.test")],
            SyncPlan(
                clear_all=False,
                clear=("a.test", "b.test"),
                applied=Applied(E1, 140, {"a.test": 120, "b.test": 140}),
                ack=True,
            ),
        ),
        # Already applied (a sync read it first): nothing to do, nothing to ack.
        ([hint(90, 100)], SyncPlan(clear_all=False, clear=(), applied=APPLIED, ack=False)),
        # Already applied, then the next one: only the next one counts.
        (
            [hint(90, 100), hint(100, 110, "b.test")],
            SyncPlan(
                clear_all=False,
                clear=("b.test",),
                applied=Applied(E1, 110, {"a.test": 50, "b.test": 110}),
                ack=True,
            ),
        ),
        # A gap (the hint of clear 110 was lost): the member must sync.
        ([hint(110, 120)], None),
        ([hint(100, 110), hint(115, 120)], None),
        # Another epoch: the data set changed; only a sync can say what to drop.
        ([hint(100, 120, epoch="e2")], None),
    ],
)
def test_plan_hints(hints: list[ClearHint], plan: SyncPlan | None) -> None:
    """0014 "Applying hints": only a gap-free continuation of the applied chain is applied
    without a sync; acking past a gap would claim a clear the member never saw."""
    assert plan_hints(APPLIED, hints) == plan


def test_no_hint_is_applied_before_the_first_sync() -> None:
    assert plan_hints(NOTHING_APPLIED, [hint(0, 5)]) is None


@pytest.mark.parametrize(
    ("hinted", "covered"),
    [
        (500, True),
        (501, True),  # a later clear acked by all: this one too
        (499, False),  # an earlier clear's hint
        (0, False),
    ],
)
def test_hints_cover_a_clear_acked_by_everyone_waited_for(hinted: int, covered: bool) -> None:
    wait = Wait(acked=1, live=3, seconds=0.05, pending=("b", "c"), threshold=500)
    assert hints_cover(wait, hinted) is covered


def test_hints_never_cover_a_wait_with_nobody_pending() -> None:
    """A wait for the grace of a new epoch: no hint can end it, only time."""
    assert not hints_cover(Wait(acked=1, live=1, seconds=1.5), 900)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("lease", "retry_after"),
    [(0.2, 1), (0.6, 1), (1.0, 2), (2.0, 2), (2.6, 3), (30.0, 30)],
)
def test_a_clear_valkey_stopped_confirming_is_retried_after_about_one_lease(
    lease: float, retry_after: int
) -> None:
    """0014 "Wait for the fleet": with no view of the members, every member that did not
    apply the clear stops serving from cache once its lease runs out."""
    assert unreachable_retry_after(lease) == retry_after
