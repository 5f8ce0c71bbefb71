"""0026's floor and decision 0040: which domains a sync clears because their generation moved
(a clear happened: everything goes) and which only because records the member needs were
dropped from the log (``SyncPlan.unknown``: what was purged is unknown, so a store that can
revalidate its entries may distrust them instead of dropping them)."""

from __future__ import annotations

import pytest

from proxy.core.lease import Applied, SyncResult, plan_sync

APPLIED = Applied(epoch="e", seq=10, generations={"a.test": 5, "b.test": 0, "c.test": 0})


@pytest.mark.parametrize(
    ("generations", "floors", "clear", "unknown"),
    [
        ({"a.test": 5, "b.test": 0, "c.test": 0}, {}, (), ()),
        ({"a.test": 12, "b.test": 0, "c.test": 0}, {}, ("a.test",), ()),  # a clear of a
        ({"a.test": 5, "b.test": 0, "c.test": 0}, {"b.test": 11}, ("b.test",), ("b.test",)),
        # b's floor is below what the member applied: it missed nothing it cannot read.
        ({"a.test": 5, "b.test": 0, "c.test": 0}, {"b.test": 9}, (), ()),
        # a was cleared (and its records dropped too): a clear, not unknown.
        (
            {"a.test": 12, "b.test": 0, "c.test": 0},
            {"a.test": 11, "c.test": 13},
            ("a.test", "c.test"),
            ("c.test",),
        ),
    ],
)
def test_domains_whose_records_were_dropped_are_unknown(
    generations: dict[str, int],
    floors: dict[str, int],
    clear: tuple[str, ...],
    unknown: tuple[str, ...],
) -> None:
    plan = plan_sync(APPLIED, SyncResult("e", 20, generations, floors=floors))
    assert (plan.clear_all, plan.clear, plan.unknown) == (False, clear, unknown)


@pytest.mark.slow
def test_a_new_epoch_clears_everything_and_names_nothing_unknown() -> None:
    """A new epoch is the store's ``clear_all``: distrusted as a whole, not per domain."""
    plan = plan_sync(APPLIED, SyncResult("f", 20, {"a.test": 0}))
    assert (plan.clear_all, plan.unknown) == (True, ())
