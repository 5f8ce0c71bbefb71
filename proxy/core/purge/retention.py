"""Purge retention: a store's purge state within a byte budget of its own (decision 0037).

Theory of operation. Beside its entries, a store holds per domain what purges other than a
clear leave behind (decision 0024):
- *remembered* purges: the domain's last purges with their items, so that a fill which
  looked up before one of them can be told whether it is covered (``fill_allowed``);
- *outstanding* lazy purges: prefix bans and tags' last purges, until every entry stored
  before them has been checked.

Neither is bounded by ``cache.max_bytes``, and a purge carries up to 256 items of up to
8 KB, so the state gets a budget of its own (``cache.purge_state_max_bytes``). Once a store
holds more than the budget, it *folds* state into something cheaper that is still correct,
cheapest first; each step only ever drops more, never less:

1. **Retire** what covers nothing: a ban numbered at or below the oldest mark of any entry
   the domain holds covers no entry (an entry is covered by a ban numbered above its mark),
   so it is dropped. With no entry held, every outstanding ban is retired.
2. **Forget** remembered purges, oldest first. A fill that looked up before the oldest
   purge still remembered is refused (it may be covered), so forgetting refuses more fills
   and never stores a purged response.
3. **Clear** the domain: its outstanding bans fold into a generation bump, which drops
   everything they could cover and more (a soft ban becomes hard). A clear costs O(1) and
   leaves nothing outstanding.

Fair shares. The budget is shared between domains by max-min fairness (``water_level``): a
domain holding less than an equal share is never folded, and the domains over the level
are folded down to it. So one domain's token, purging as much as it may, only ever folds
its own domain's state.

Hysteresis: past the budget, domains are folded to FOLD_TO of it, so a steady stream of
purges folds once per (1 - FOLD_TO) of the budget, not on every purge.

The same rule serves every tier and every fleet member: each applies it to what it holds,
and since every fold only drops more, members folding at different moments stay correct.
No I/O here: the store passes in what it holds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from proxy.core.purge.purges import Purge

DEFAULT_MAX_BYTES = 64 * 1024**2  # cache.purge_state_max_bytes unless set
FOLD_TO = 7 / 8  # past the budget, fold to this fraction of it

# What a string, a remembered purge and an outstanding ban or tag cost in CPython beyond
# their characters (measured with sys.getsizeof and tracemalloc; an estimate, on the high
# side): an ASCII str's header is 49 bytes, a tuple slot 8; a purge in the deque is the
# Purge, its items tuple, the (number, purge) pair and the deque slot; a ban or a tag is a
# dict slot and its LastPurges.
STR_BYTES = 49
ITEM_BYTES = STR_BYTES + 8
PURGE_BYTES = 240
BAN_BYTES = STR_BYTES + 160


def purge_bytes(purge: Purge) -> int:
    """What remembering ``purge`` costs."""
    return PURGE_BYTES + sum(ITEM_BYTES + len(item) for item in purge.items)


def ban_bytes(item: str) -> int:
    """What one outstanding prefix ban or tag purge costs."""
    return BAN_BYTES + len(item)


def retire_upto(number: int, oldest_mark: int | None) -> int:
    """Step 1: the newest purge number whose bans cover nothing the domain holds, given the
    oldest mark among its entries (None: it holds none). ``number`` is the domain's purge
    number: an entry stored from now on is marked with it, so no outstanding ban covers it."""
    return number if oldest_mark is None else min(number, oldest_mark)


@dataclass(frozen=True, slots=True)
class Held:
    """What one domain's purge state costs, in bytes (``purge_bytes``, ``ban_bytes``)."""

    remembered: int
    outstanding: int

    @property
    def total(self) -> int:
        return self.remembered + self.outstanding


@dataclass(frozen=True, slots=True)
class Fold:
    """What to do to one domain: forget remembered purges, oldest first, until at most
    ``keep`` bytes of them are left; or, with ``clear``, clear the domain (its outstanding
    bans and remembered purges all go)."""

    domain: str
    keep: int
    clear: bool = False


def target(budget: int) -> int:
    """What a fold brings the state down to."""
    return int(budget * FOLD_TO)


def water_level(sizes: Sequence[int], budget: int) -> int:
    """The largest level such that the sizes, each capped at it, sum to at most ``budget``
    (max-min fairness): a size under an equal share of the budget is never capped."""
    left, count = budget, len(sizes)
    for size in sorted(sizes):
        if size * count > left:
            return left // count
        left -= size
        count -= 1
    return max(sizes, default=0)


def plan(held: Mapping[str, Held], budget: int) -> tuple[Fold, ...]:
    """Steps 2 and 3 (after the store has retired what covers nothing): the folds that bring
    the state from over ``budget`` down to ``target(budget)``; none while within it. Each
    domain over the water level is folded to it: by forgetting remembered purges when its
    outstanding ones fit under the level, by a clear when they do not."""
    if sum(h.total for h in held.values()) <= budget:
        return ()
    level = water_level([h.total for h in held.values()], target(budget))
    folds = []
    for domain, h in held.items():
        if h.total <= level:
            continue
        if h.outstanding <= level:
            folds.append(Fold(domain, keep=level - h.outstanding))
        else:
            folds.append(Fold(domain, keep=0, clear=True))
    return tuple(folds)
