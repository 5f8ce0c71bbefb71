"""Purge retention (decision 0037): the fold rule that keeps a store's purge state within
its byte budget, each domain to a max-min fair share, cheapest fold first."""

from __future__ import annotations

import pytest

from proxy.core.purge.purges import purge_request
from proxy.core.purge.retention import (
    BAN_BYTES,
    FOLD_TO,
    ITEM_BYTES,
    PURGE_BYTES,
    Fold,
    Held,
    ban_bytes,
    plan,
    purge_bytes,
    retire_upto,
    target,
    water_level,
)


@pytest.mark.parametrize(
    ("sizes", "budget", "level"),
    [
        ([], 100, 0),  # nothing held
        ([10, 20], 100, 20),  # all fit: nothing capped
        ([50, 50], 100, 50),  # exactly the budget
        ([90, 90], 100, 50),  # two equal domains: half each
        ([10, 500], 100, 90),  # the small one keeps its 10, the big one gets the rest
        ([10, 20, 1000], 100, 70),
        ([40, 40, 40], 100, 33),  # floors: never over the budget
        ([1000], 100, 100),
    ],
)
def test_water_level_caps_only_what_is_over_a_fair_share(
    sizes: list[int], budget: int, level: int
) -> None:
    assert water_level(sizes, budget) == level
    assert sum(min(size, level) for size in sizes) <= budget


def test_a_domain_under_an_equal_share_is_never_capped() -> None:
    for count in range(1, 20):
        sizes = [3] + [10_000] * count
        assert water_level(sizes, 100) >= min(3, 100 // (count + 1))


@pytest.mark.parametrize(
    ("held", "folds"),
    [
        # within the budget (1000): nothing folds
        ({"a.test": Held(600, 400)}, ()),
        ({"a.test": Held(300, 0), "b.test": Held(300, 400)}, ()),
        # one domain over: its remembered purges go, down to the target (875) less what is
        # outstanding
        ({"a.test": Held(1200, 0)}, (Fold("a.test", keep=875),)),
        ({"a.test": Held(1200, 300)}, (Fold("a.test", keep=575),)),
        # its outstanding bans alone are over the level: they fold into a clear
        ({"a.test": Held(0, 1001)}, (Fold("a.test", keep=0, clear=True),)),
        ({"a.test": Held(200, 900)}, (Fold("a.test", keep=0, clear=True),)),
        # the flooding domain pays, the other keeps everything it holds
        ({"a.test": Held(5000, 0), "b.test": Held(200, 100)}, (Fold("a.test", keep=575),)),
        (
            {"a.test": Held(0, 5000), "b.test": Held(300, 0)},
            (Fold("a.test", keep=0, clear=True),),
        ),
        # two domains over: both to the same level (437 each of 875)
        (
            {"a.test": Held(900, 0), "b.test": Held(100, 800)},
            (Fold("a.test", keep=437), Fold("b.test", keep=0, clear=True)),
        ),
    ],
)
def test_plan_folds_the_domains_over_their_share(
    held: dict[str, Held], folds: tuple[Fold, ...]
) -> None:
    assert plan(held, 1000) == folds


def test_after_the_plan_the_state_is_within_the_target() -> None:
    held = {f"d{n}.test": Held(n * 97 % 700, n * 31 % 300) for n in range(40)}
    budget = 5000
    after = dict(held)
    for fold in plan(held, budget):
        after[fold.domain] = (
            Held(0, 0) if fold.clear else Held(fold.keep, held[fold.domain].outstanding)
        )
    assert sum(h.total for h in after.values()) <= target(budget)
    assert target(budget) == int(budget * FOLD_TO)


@pytest.mark.parametrize(
    ("number", "oldest_mark", "upto"),
    [
        (10, None, 10),  # nothing held: every ban covers nothing
        (10, 4, 4),  # an entry marked 4 is covered by bans numbered 5 and up
        (10, 10, 10),  # every entry checked since the last purge
        (10, 0, 0),  # an entry stored before any purge: nothing is retired
    ],
)
def test_retire_upto_keeps_every_ban_that_could_cover_a_held_entry(
    number: int, oldest_mark: int | None, upto: int
) -> None:
    assert retire_upto(number, oldest_mark) == upto


@pytest.mark.slow
def test_costs_count_every_item_and_its_characters() -> None:
    urls = purge_request("url", ["/a", "/" + "x" * 3999])
    assert purge_bytes(urls) == PURGE_BYTES + 2 * ITEM_BYTES + 2 + 4000
    assert purge_bytes(purge_request("all")) == PURGE_BYTES
    assert ban_bytes("/static/") == BAN_BYTES + 8
