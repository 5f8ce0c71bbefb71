"""A domain's purge state as the shared tier holds it, and how an entry is judged by it.

``DomainState`` is one domain's record (purge_state.py keeps them, decision 0030): its purge
number, its last clear, its prefix bans and tag purges, its distrust floor (0040), and the
URL purges a reader has read from the URL log (url_log.py, 0048). ``judge`` says what they
make of an entry with a given mark: served, gone, stale from a soft purge's time, or to be
revalidated first.

The record's layout (decision 0048): the purge number (8 bytes), then a JSON list whose first
fields are those of the first layout, written so that code of that layout reads it safely,
then the layout's own fields in a versioned object.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from proxy.core.cache.entry import StoredResponse
from proxy.core.cache.keys import target_of
from proxy.core.purge.purges import HARD, Bans, Covered, LastPurges, Purge, covering
from proxy.store.shared.records import pack_number, read_number

LAYOUT = 2  # of a domain's record: its URL purges in the URL log (decision 0048)


@dataclass(slots=True)
class DomainState:
    number: int = 0
    cleared: int = 0  # the number the last clear moved it to: older marks are gone
    bans: Bans = field(default_factory=Bans)
    tags: dict[str, LastPurges] = field(default_factory=dict)
    urls: dict[str, LastPurges] = field(default_factory=dict)  # request-target -> purges
    top: int = 0  # the newest outstanding ban or purge: marks at or above it need no check
    distrusted: int = 0  # marks under it are served only once revalidated (decision 0040)
    # The URL log (url_log.py, decision 0048): the bytes of the domain's live log records
    # (counted in the budget), the newest URL purge's number, and (a reader's) the number up
    # to which ``urls`` holds the log, to read on from.
    log_bytes: int = 0
    log_targets: int = 0  # the URLs its live log records name (with repeats)
    url_top: int = 0
    read_to: int = 0
    legacy: bool = False  # read from a record of the first layout: its URL purges inline
    # The URL log's retirement (url_log.RETIRE, decision 0059), kept beside the record, not
    # in it: fills whose token is under ``refuse`` are refused; the log is gone up to
    # ``retired``, so a reader starts past it.
    refuse: int = 0
    retired: int = 0
    fleet: tuple[str, int] | None = None  # the fleet's (epoch, number) applied to it (0048)

    def clear(self) -> int:
        self.number += 1
        self.cleared = self.number
        self.bans = Bans()
        self.tags = {}
        self.urls = {}
        self.top = 0
        self.log_bytes = 0
        self.log_targets = 0
        self.url_top = 0
        self.legacy = False
        return self.number

    def distrust(self) -> int:
        """Every entry stored so far is to be revalidated before it is served: its number."""
        self.number += 1
        self.distrusted = self.number
        return self.number

    def floored(self, floor: int) -> DomainState:
        """The state under a distrust of every domain at ``floor``: its number at least the
        floor (a lookup from now on marks its fill at or above it), its own floor at least
        the floor (every mark given out before is under it)."""
        if self.number < floor:
            self.number = floor
        if self.distrusted < floor:
            self.distrusted = floor
        return self

    def add(self, purge: Purge, at: float) -> int:
        """Record a purge other than a hard ``all`` (a clear) and a URL purge (``add_url``):
        its number."""
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

    def add_url(self, purge: Purge) -> int:
        """Number a URL purge, whose targets go to the URL log (the caller's): its number."""
        self.number += 1
        self.top = self.url_top = self.number
        return self.number

    @property
    def held(self) -> int:
        """The bytes the domain's purge state holds: its record and its live URL log."""
        return len(self.to_bytes()) + self.log_bytes

    def to_bytes(self) -> bytes:
        """The record, in the second layout (decision 0048). Its first fields are the first
        layout's, written so that code of that layout reads it safely: ``cleared`` there is
        at least the newest URL purge's number (the URL purges it cannot see, in the log,
        are read by it as a clear), and its inline URL table is empty. The fields of this
        layout follow, in a versioned object that code reads past."""

        def lasts(table: dict[str, LastPurges]) -> list[list[Any]]:
            return [[k, v.hard, v.soft, v.soft_at] for k, v in table.items()]

        compat = max(self.cleared, self.url_top)
        body: list[Any] = [compat, self.top, lasts(self.bans.by_prefix), lasts(self.tags), []]
        layout: dict[str, Any] = {"v": LAYOUT, "cleared": self.cleared, "log": self.log_bytes}
        layout["url_top"] = self.url_top
        if self.log_targets:
            layout["targets"] = self.log_targets
        if self.fleet is not None:
            layout["fleet"] = list(self.fleet)
        body += [self.distrusted, layout]
        return pack_number(self.number, json.dumps(body, separators=(",", ":")).encode())

    @classmethod
    def from_bytes(cls, record: bytes | memoryview) -> DomainState:
        """A record of either layout. One of the first layout (or of a layout to come that
        this code does not know: read by its first fields, which any layout keeps safe for
        older code) has its URL purges inline (``legacy``)."""
        cleared, top, bans, tags, urls, *rest = json.loads(bytes(record[8:]))
        state = cls(number=read_number(record), cleared=cleared, top=top)
        state.distrusted = int(rest[0]) if rest else 0
        layout = rest[1] if len(rest) > 1 and isinstance(rest[1], dict) else {}
        if layout.get("v") == LAYOUT:
            state.cleared = int(layout["cleared"])
            state.log_bytes = int(layout["log"])
            state.url_top = int(layout["url_top"])
            state.log_targets = int(layout.get("targets", 0))
            fleet = layout.get("fleet")
            state.fleet = None if fleet is None else (str(fleet[0]), int(fleet[1]))
        for prefix, hard, soft, soft_at in bans:
            if hard:
                state.bans.add(hard, (prefix,), False, 0.0)
            if soft:
                state.bans.add(soft, (prefix,), True, soft_at)
        for table, rows in ((state.tags, tags), (state.urls, urls)):
            for key, hard, soft, soft_at in rows:
                table[key] = LastPurges(hard, soft, soft_at)
        state.legacy = layout.get("v") != LAYOUT
        state.read_to = state.number
        return state


# An entry stored before a distrust (decision 0040): served only once revalidated. Compared by
# identity; as a Covered it reads as stale since ever, for code that does not tell it apart.
DISTRUSTED = Covered(hard=False, stale_at=float("-inf"))


def judge(state: DomainState, mark: int, target: str, tags: tuple[str, ...]) -> Covered | None:
    """What the domain's purges say about an entry with ``mark``, stored under ``target``
    (a key target: either scheme's) with ``tags``: None when nothing covers it, HARD when
    it is gone, DISTRUSTED when it must be revalidated first (a hard purge still wins)."""
    if mark < state.cleared:
        return HARD
    if mark >= state.top:  # the usual case, with no call: nothing outstanding is newer
        return None if mark >= state.distrusted else DISTRUSTED
    found = _purged(state, mark, target, tags)
    return DISTRUSTED if mark < state.distrusted and found is not HARD else found


def distrusted_copy(response: StoredResponse) -> StoredResponse | None:
    """What a lookup hands the edge for a DISTRUSTED entry: a copy stale at once, with no
    stale-while-revalidate and no stale-if-error, so the edge sends a conditional request and
    serves it only on a 304; None when it has no validator (dropped: a miss)."""
    if response.etag is None and response.last_modified is None:
        return None
    return response.copy_with(
        freshness_lifetime=0.0, stale_while_revalidate=0.0, stale_if_error=0.0
    )


def _purged(state: DomainState, mark: int, target: str, tags: tuple[str, ...]) -> Covered | None:
    """The domain's bans, tag and URL purges numbered above ``mark`` (under ``state.top``)
    that cover the entry."""
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
