"""A clear's hint says whether the members' acks must carry figures (decision 0026, "The
cost of a clear"): only a hard purge of ``all`` asks; a plain clear's answer shows none."""

from __future__ import annotations

from proxy.core.lease import Applied, plan_hints
from proxy.wire.fleet import unpack_hint

APPLIED = Applied(epoch="e1", seq=10, generations={"a.test": 0, "b.test": 0})


def test_a_clear_hint_asks_for_figures_only_with_its_fifth_word() -> None:
    plain = unpack_hint("e1 10 11 a.test")
    counted = unpack_hint("e1 10 11 a.test clear")
    assert (plain.kind, plain.figures) == ("clear", False)
    assert (counted.kind, counted.figures) == ("clear", True)
    purge = unpack_hint("e1 10 11 a.test all")  # a soft purge of all: a record
    assert (purge.kind, purge.figures) == ("all", False)


def test_a_batch_of_hints_clears_both_domains_whichever_asks_for_figures() -> None:
    hints = [unpack_hint(t) for t in ("e1 10 11 a.test", "e1 11 12 b.test clear")]
    plan = plan_hints(APPLIED, hints)
    assert plan is not None
    assert (plan.clear, plan.applied.seq, plan.purges) == (("a.test", "b.test"), 12, ())
