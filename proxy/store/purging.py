"""The memory store's side of purges beyond a whole domain (decision 0024, core/purges.py).

Per domain that has had any purge but a plain clear, a ``DomainPurges`` keeps:
- ``number``: the domain's purge number. Every purge, and every clear after the first purge,
  moves it on. A lookup's key carries it (``CacheKey``'s second part), so a fill that looked
  up before a purge is recognised when it stores (``fill_allowed``), and a request made after
  a purge never joins the collapsed waiters of a fill made before it (as with clears, 0003).
- the outstanding lazy purges: prefix bans (a soft ``all`` is the ban of ""), oldest first,
  and per tag the numbers of its last hard and soft purge; ``top`` is the newest of them, 0
  when none is outstanding. An entry whose mark is below ``top`` is checked once, when next
  read (``covering``), and marked with ``number``.
- ``recent``: the last RECENT purges, so ``put`` can tell whether one covers a fill that
  looked up before it. A fill older than all of them is refused, to be safe.
- ``remembered`` and ``outstanding``: what ``recent`` and the lazy purges cost, in bytes
  (core/purge/retention.py), kept as they change, so the store can hold its purge state
  within ``cache.purge_state_max_bytes`` by folding it (``forget``, ``retire``, a clear).
- ``walk``: the slice walker that retires lazy purges. It visits every key of the domain's
  current bucket once (the keys listed when it started, and any since), checking and
  marking each entry; once through, every entry's mark is at least the number it started
  at, so every lazy purge up to that number covers nothing more and is dropped. The store's
  background task runs it between requests, like the reclaim after a clear.

``dry_count`` counts what a purge would cover, for a dry run, without changing anything.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from proxy.core.cache.entry import StoredResponse
from proxy.core.cache.keys import target_of
from proxy.core.purge.purges import HARD, MAX_SAMPLE, Bans, LastPurges, Purge, covering
from proxy.core.purge.retention import (
    DEFAULT_MAX_BYTES,
    Held,
    ban_bytes,
    plan,
    purge_bytes,
    retire_upto,
)

RECENT = 1024  # purges remembered per domain for fills in flight
KEY_CHUNK = 256  # a bucket's newest keys are sealed into a tuple this long (entries.Bucket)
DRY_SLICE = 2000  # keys a dry run reads between yields to the event loop


@dataclass(slots=True)
class Walk:
    """Where the walker is in a bucket's listed keys."""

    upto: int  # the domain's number when it started: it retires lazy purges up to this
    index: int = 0  # the next listed key (sealed chunks in order, then the unsealed keys)
    relists: int = 0  # the bucket's compactions when it started; one more restarts it


@dataclass(slots=True)
class PurgeBudget:
    """A store's purge state against ``cache.purge_state_max_bytes`` (core/purge/retention.py):
    the bytes every domain's state costs, kept by each ``DomainPurges`` as it changes, and
    what folding has done so far (for /metrics)."""

    max_bytes: int = DEFAULT_MAX_BYTES
    held: int = 0
    forgotten: int = 0  # remembered purges forgotten
    retired: int = 0  # outstanding prefixes and tags retired by a fold (covering nothing)
    cleared: int = 0  # domains whose outstanding purges were folded into a clear


@dataclass(slots=True)
class DomainPurges:
    number: int  # the domain's purge number (a lookup key's second part)
    cleared: int  # the number at the domain's last clear: older lookups are refused
    prefix: str  # "domain generation ": the start of its keys in the store
    bans: Bans = field(default_factory=Bans)
    tags: dict[str, LastPurges] = field(default_factory=dict)
    top: int = 0  # the newest outstanding lazy purge; 0: none, entries need no check
    recent: deque[tuple[int, Purge]] = field(default_factory=deque)
    walk: Walk | None = None
    budget: PurgeBudget = field(default_factory=PurgeBudget)  # the store's, shared
    remembered: int = 0  # bytes of ``recent`` (retention.purge_bytes)
    outstanding: int = 0  # bytes of the outstanding bans and tags (retention.ban_bytes)

    def next_number(self, purge: Purge) -> int:
        self.number += 1
        if len(self.recent) >= RECENT:
            self.forget(len(self.recent) - RECENT + 1)
        self.recent.append((self.number, purge))
        self._grow(purge_bytes(purge), 0)
        return self.number

    def _grow(self, remembered: int, outstanding: int) -> None:
        self.remembered += remembered
        self.outstanding += outstanding
        self.budget.held += remembered + outstanding

    @property
    def held(self) -> Held:
        return Held(remembered=self.remembered, outstanding=self.outstanding)

    def forget(self, count: int) -> int:
        """Forget the ``count`` oldest remembered purges; return how many were. A fill that
        looked up before the oldest one left is refused (``fill_allowed``): safe."""
        count = min(count, len(self.recent))
        for _ in range(count):
            self._grow(-purge_bytes(self.recent.popleft()[1]), 0)
        return count

    def forget_to(self, keep: int) -> int:
        """Forget remembered purges, oldest first, until they cost at most ``keep`` bytes;
        return how many were forgotten."""
        count = 0
        while self.remembered > keep and self.recent:
            count += self.forget(1)
        return count

    def cleared_now(self, prefix: str) -> None:
        """A hard clear (to the generation ``prefix`` names): nothing stored before it can be
        read again, so nothing lazy is outstanding any more."""
        self.number += 1
        self.cleared = self.number
        self.prefix = prefix
        self.bans = Bans()
        self.tags.clear()
        self.top = 0
        self.recent.clear()
        self.walk = None
        self._grow(-self.remembered, -self.outstanding)

    def add_ban(self, number: int, prefixes: tuple[str, ...], soft: bool, at: float) -> None:
        known = self.bans.by_prefix
        self._grow(0, sum(ban_bytes(p) for p in prefixes if p not in known))
        self.bans.add(number, prefixes, soft, at)
        self.top = number

    def add_tags(self, number: int, tags: tuple[str, ...], soft: bool, at: float) -> None:
        for tag in tags:
            last = self.tags.get(tag)
            if last is None:
                last = self.tags[tag] = LastPurges()
                self._grow(0, ban_bytes(tag))
            last.add(number, soft, at)
        self.top = number

    def fill_allowed(self, token: int, target: str, tags: tuple[str, ...]) -> bool:
        """May a response fetched after a lookup that saw ``token`` be stored now? Not if a
        clear came since, nor a purge that covers it (soft ones too: it may be older than
        them), nor when the purges since are no longer all remembered."""
        if token < self.cleared or token > self.number:
            return False
        if token == self.number:
            return True
        since = self.number - token
        if since > len(self.recent):
            return False
        for index in range(len(self.recent) - since, len(self.recent)):
            if covers(self.recent[index][1], target, tags):
                return False
        return True

    def retire(self, upto: int) -> int:
        """Every entry's mark is now at least ``upto``: lazy purges up to it are done.
        Returns how many prefixes and tags were retired."""
        before = len(self.bans) + len(self.tags)
        self.bans.retire(upto)
        for tag in [t for t, last in self.tags.items() if last.newest <= upto]:
            del self.tags[tag]
        newest = (last.newest for last in self.tags.values())
        self.top = max(self.bans.newest(), max(newest, default=0))
        retired = before - len(self.bans) - len(self.tags)
        if retired:
            left = sum(map(ban_bytes, self.bans.by_prefix)) + sum(map(ban_bytes, self.tags))
            self._grow(0, left - self.outstanding)
        return retired


def fold(
    states: Mapping[str, DomainPurges],
    budget: PurgeBudget,
    holds_entries: Callable[[str], bool],
) -> list[str]:
    """Bring the purge state (every domain's ``states``, all sharing ``budget``) back within
    the budget (core/purge/retention.py): retire the outstanding purges of domains that hold
    no entry, then forget remembered purges where the plan says so; return the domains whose
    outstanding purges must fold into a clear (the caller clears them: the clear drops
    their state)."""
    for domain, state in states.items():
        if state.outstanding and not holds_entries(domain):
            budget.retired += state.retire(retire_upto(state.number, None))
    cleared = []
    for step in plan({d: s.held for d, s in states.items()}, budget.max_bytes):
        if step.clear:
            cleared.append(step.domain)
        else:
            budget.forgotten += states[step.domain].forget_to(step.keep)
    budget.cleared += len(cleared)
    return cleared


def covers(purge: Purge, target: str, tags: tuple[str, ...]) -> bool:
    """Does ``purge`` (of the entry's domain) cover a response stored under ``target`` with
    ``tags``? (The same rules ``covering`` applies lazily.)"""
    if purge.kind == "all":
        return True
    if purge.kind == "url":
        return target_of(target) in purge.items  # either scheme's
    if purge.kind == "prefix":
        return target_of(target).startswith(purge.items)  # either scheme's
    return any(tag in purge.items for tag in tags)


def listed_key(sealed: list[tuple[str, ...]], keys: list[str], index: int) -> str | None:
    """The bucket's ``index``-th listed key, None past the last (entries.Bucket's layout:
    sealed tuples of KEY_CHUNK keys, oldest first, then the unsealed ones)."""
    chunk, offset = divmod(index, KEY_CHUNK)
    if chunk < len(sealed):
        return sealed[chunk][offset]
    offset = index - KEY_CHUNK * len(sealed)
    return keys[offset] if offset < len(keys) else None


async def dry_count(
    keys: Iterable[str],
    held: Callable[[str], Sequence[StoredResponse]],
    *,
    prefix: str,
    state: DomainPurges | None,
    purge: Purge,
) -> tuple[int, int, tuple[str, ...]]:
    """What ``purge`` would cover among ``keys`` (each read with ``held``: its variants, none
    when it holds nothing) now: entries, bytes, and up to MAX_SAMPLE request-targets. A
    variant an outstanding lazy purge already covers hard is gone, not counted. DRY_SLICE keys
    at a time, yielding to requests between slices; a key listed twice counts once."""
    entries = size = 0
    sample: list[str] = []
    seen: set[str] = set()
    for count, key in enumerate(keys, 1):
        if count % DRY_SLICE == 0:
            await asyncio.sleep(0)
        if key in seen:
            continue
        variants = held(key)
        if not variants:
            continue
        seen.add(key)
        target = key[len(prefix) :]
        for variant in variants:
            if state is not None and variant.mark < state.top:
                gone = covering(
                    state.bans, state.tags, mark=variant.mark, target=target, tags=variant.tags
                )
                if gone is HARD:
                    continue  # purged already, not yet dropped
            if covers(purge, target, variant.tags):
                entries += 1
                size += variant.size
                named = target_of(target)  # either scheme's
                if len(sample) < MAX_SAMPLE and named not in sample:
                    sample.append(named)
    return entries, size, tuple(sample)
