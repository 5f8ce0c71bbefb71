"""The shared tier's purge state: durable before a purge returns, applied at every lookup.

Per domain one counter, the *purge number*, as the memory store's (decision 0024): every clear
and every purge moves it on. A fill takes the number its lookup saw as its entry's *mark*, and
an entry is judged at every lookup (``judge``):
- stored before the domain's last clear (``mark < cleared``): gone, whatever else;
- covered by a prefix ban, a tag purge or a URL purge numbered above its mark: gone (hard), or
  stale from the purge's time (soft). The matching rules are core's (``covering``, ``Bans``,
  ``LastPurges``); a URL purge is a ban of the exact request-target (either scheme).
Nothing on disk is visited at purge time: a purge is one small record, so it is O(items).

The records live in their own LMDB environment (``state/``), opened synced: a commit returns
after fsync, so a clear or a purge is on disk before the caller answers 200, and survives a
kill -9 and a power loss. Readers keep each domain's parsed state and parse it again only when
its number moved (``StateCache``), so a lookup costs one small ``get`` for it.

Bans and URL purges are kept until the domain's next clear; retiring them earlier, once no
entry older than them is left, is left to the tier's lurker (not written yet).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import lmdb

from proxy.core.cache.keys import target_of
from proxy.core.purge.purges import HARD, Bans, Covered, LastPurges, Purge, covering
from proxy.store.shared.records import pack_number, read_number


@dataclass(slots=True)
class DomainState:
    number: int = 0
    cleared: int = 0  # the number the last clear moved it to: older marks are gone
    bans: Bans = field(default_factory=Bans)
    tags: dict[str, LastPurges] = field(default_factory=dict)
    urls: dict[str, LastPurges] = field(default_factory=dict)  # request-target -> purges
    top: int = 0  # the newest outstanding ban or purge: marks at or above it need no check

    def clear(self) -> int:
        self.number += 1
        self.cleared = self.number
        self.bans = Bans()
        self.tags = {}
        self.urls = {}
        self.top = 0
        return self.number

    def add(self, purge: Purge, at: float) -> int:
        """Record a purge other than a hard ``all`` (a clear): its number."""
        self.number += 1
        number = self.number
        if purge.kind == "all":
            self.bans.add(number, ("",), purge.soft, at)
        elif purge.kind == "prefix":
            self.bans.add(number, purge.items, purge.soft, at)
        else:
            table = self.tags if purge.kind == "tag" else self.urls
            for item in purge.items:
                table.setdefault(item, LastPurges()).add(number, purge.soft, at)
        self.top = number
        return number

    def to_bytes(self) -> bytes:
        def lasts(table: dict[str, LastPurges]) -> list[list[Any]]:
            return [[k, v.hard, v.soft, v.soft_at] for k, v in table.items()]

        body = [self.cleared, self.top, lasts(self.bans.by_prefix), lasts(self.tags)]
        body.append(lasts(self.urls))
        return pack_number(self.number, json.dumps(body, separators=(",", ":")).encode())

    @classmethod
    def from_bytes(cls, record: bytes | memoryview) -> DomainState:
        cleared, top, bans, tags, urls = json.loads(bytes(record[8:]))
        state = cls(number=read_number(record), cleared=cleared, top=top)
        for prefix, hard, soft, soft_at in bans:
            if hard:
                state.bans.add(hard, (prefix,), False, 0.0)
            if soft:
                state.bans.add(soft, (prefix,), True, soft_at)
        for table, rows in ((state.tags, tags), (state.urls, urls)):
            for key, hard, soft, soft_at in rows:
                table[key] = LastPurges(hard, soft, soft_at)
        return state


def judge(state: DomainState, mark: int, target: str, tags: tuple[str, ...]) -> Covered | None:
    """What the domain's purges say about an entry with ``mark``, stored under ``target``
    (a key target: either scheme's) with ``tags``: None when nothing covers it."""
    if mark < state.cleared:
        return HARD
    if mark >= state.top:
        return None
    found = covering(state.bans, state.tags, mark=mark, target=target, tags=tags)
    if found is HARD:
        return found
    last = state.urls.get(target_of(target))
    if last is None:
        return found
    if last.hard > mark:
        return HARD
    if last.soft > mark and (found is None or last.soft_at < found.stale_at):
        return Covered(hard=False, stale_at=last.soft_at)
    return found


class PurgeStateStore:
    """The ``state/`` environment: read by every process at lookup, written by purges."""

    def __init__(self, env: lmdb.Environment) -> None:
        self._env = env
        self._parsed: dict[str, DomainState] = {}

    def current(self, domain: str) -> DomainState:
        """The domain's state as last committed (a fresh default if never purged)."""
        key = domain.encode()
        with self._env.begin(buffers=True) as txn:
            record = txn.get(key)
            if record is None:
                return self._parsed.get(domain) or DomainState()
            cached = self._parsed.get(domain)
            if cached is not None and cached.number == read_number(record):
                return cached
            state = DomainState.from_bytes(record)
        self._parsed[domain] = state
        return state

    def _update(self, domain: str, change: Any) -> int:
        """Apply ``change`` (DomainState -> number) to the domain's committed state in one
        synced write transaction; the new number."""
        key = domain.encode()
        with self._env.begin(write=True) as txn:
            record = txn.get(key)
            state = DomainState() if record is None else DomainState.from_bytes(record)
            number: int = change(state)
            txn.put(key, state.to_bytes())
        self._parsed[domain] = state
        return number

    def clear(self, domain: str) -> int:
        return self._update(domain, DomainState.clear)

    def add(self, domain: str, purge: Purge, at: float) -> int:
        return self._update(domain, lambda state: state.add(purge, at))
