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
kill -9 and a power loss. Readers keep each domain's parsed state until a purge announces
itself in ``state/stamp`` (``PurgeStateStore``), so a lookup costs no transaction for it.

Retention (decision 0037). Bans, tag and URL purges are kept until the domain's next clear, so
the records get a byte budget (``cache.purge_state_max_bytes``, the node's, not divided: one
tier per node). The bytes counted are the records' own (what each purge rewrites and fsyncs,
and what a reader parses), summed in a meta record (``TOTAL``) kept by every write in its own
transaction. A purge that takes the total over the budget also folds, in the same synced
transaction: ``retention.plan`` over every domain's record size (all *outstanding*, nothing
remembered) names the domains over the fair level, and each is cleared (``DomainState.clear``:
its entries' marks are then under ``cleared``, misses). Retiring only the bans older than the
domain's oldest entry would need that mark, which the tier does not keep (left to its lurker,
not written yet); a clear drops more, never less, so no ban that covers a stored entry is lost.

Distrust (decision 0040). A fleet member that cannot know which purges its node missed (its
fleet's Valkey lost its data: a new epoch; or the log was trimmed past what it applied) does
not drop the tier: it *distrusts* it. An entry whose mark is under the distrust floor is judged
``DISTRUSTED``: never served until the origin has revalidated it (a conditional request: a 304
keeps the body, and the refreshed fill stores it under a mark above the floor, trusted again),
and dropped when it has no validator. Not stale-while-revalidate, not stale-if-error: the edge
gets a copy expired at once that forbids both (``distrusted_copy``). For one domain the floor
is the domain's own (``DomainState.distrusted``, moved like a clear moves ``cleared``). For
every domain at once, O(1): the meta record ``FLOOR`` holds a number above every number any
domain has had (``TOP``, the highest, kept by every write); every domain's number reads as at
least that floor from then on, so a lookup made after the distrust hands its fill a mark at or
above it, and every mark given out before is under it. One synced write, whatever the number
of domains or entries.
"""

from __future__ import annotations

import json
import mmap
import os
import struct
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import lmdb

from proxy.core.cache.entry import StoredResponse
from proxy.core.cache.keys import target_of
from proxy.core.purge.purges import HARD, Bans, Covered, LastPurges, Purge, covering
from proxy.core.purge.retention import DEFAULT_MAX_BYTES, Held, plan
from proxy.store.shared.records import pack_number, read_number

STAMP = struct.Struct("<Q")  # state/stamp: the id of the last purge's transaction
# Meta records beside the domains' (a domain name never starts with NUL): the records' bytes,
# and how many domains a fold has cleared.
TOTAL = b"\x00total"
FOLDED = b"\x00folded"
# Distrust of every domain (decision 0040): the floor, the highest number any domain's record
# has held (so that a new floor is above them all), and what the last floor was made for (a
# fleet member's epoch and number: members of one node making the same one skip it).
FLOOR = b"\x00floor"
TOP = b"\x00top"
FLOOR_FOR = b"\x00floor-for"
_COUNT = struct.Struct("<Q")


def _count(txn: lmdb.Transaction, key: bytes) -> int:
    value = txn.get(key)
    return 0 if value is None else int(_COUNT.unpack(value)[0])


def _sizes(txn: lmdb.Transaction) -> dict[str, int]:
    """Every domain's record size (the meta records skipped)."""
    return {
        bytes(key).decode(): len(value)
        for key, value in txn.cursor().iternext()
        if not bytes(key).startswith(b"\x00")
    }


def _top(txn: lmdb.Transaction) -> int:
    """The highest number any domain's record has held (counted once in a directory from
    before the count: each record's number is its first 8 bytes)."""
    if txn.get(TOP) is not None:
        return _count(txn, TOP)
    return max(
        (
            read_number(value)
            for key, value in txn.cursor().iternext()
            if not bytes(key).startswith(b"\x00")
        ),
        default=0,
    )


def _read_state(txn: lmdb.Transaction, key: bytes) -> DomainState:
    """A domain's committed state, under the floor of the last distrust of every domain."""
    record = txn.get(key)
    state = DomainState() if record is None else DomainState.from_bytes(record)
    floor = txn.get(FLOOR)
    return state if floor is None else state.floored(int(_COUNT.unpack(floor)[0]))


@dataclass(slots=True)
class DomainState:
    number: int = 0
    cleared: int = 0  # the number the last clear moved it to: older marks are gone
    bans: Bans = field(default_factory=Bans)
    tags: dict[str, LastPurges] = field(default_factory=dict)
    urls: dict[str, LastPurges] = field(default_factory=dict)  # request-target -> purges
    top: int = 0  # the newest outstanding ban or purge: marks at or above it need no check
    distrusted: int = 0  # marks under it are served only once revalidated (decision 0040)

    def clear(self) -> int:
        self.number += 1
        self.cleared = self.number
        self.bans = Bans()
        self.tags = {}
        self.urls = {}
        self.top = 0
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
        if self.distrusted:
            body.append(self.distrusted)
        return pack_number(self.number, json.dumps(body, separators=(",", ":")).encode())

    @classmethod
    def from_bytes(cls, record: bytes | memoryview) -> DomainState:
        cleared, top, bans, tags, urls, *rest = json.loads(bytes(record[8:]))
        state = cls(number=read_number(record), cleared=cleared, top=top)
        state.distrusted = int(rest[0]) if rest else 0
        for prefix, hard, soft, soft_at in bans:
            if hard:
                state.bans.add(hard, (prefix,), False, 0.0)
            if soft:
                state.bans.add(soft, (prefix,), True, soft_at)
        for table, rows in ((state.tags, tags), (state.urls, urls)):
            for key, hard, soft, soft_at in rows:
                table[key] = LastPurges(hard, soft, soft_at)
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
    copy = replace(response, freshness_lifetime=0.0, stale_while_revalidate=0.0, stale_if_error=0.0)
    object.__setattr__(copy, "mark", response.mark)  # replace leaves it 0
    return copy


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


class PurgeStateStore:
    """The ``state/`` environment: read by every process at lookup, written by purges.

    A lookup must not pay a read transaction for its domain's state (about 12,600
    instructions, decision 0030). So every purge, once committed, writes its transaction's
    id into ``state/stamp``, an 8-byte file every process of the node maps; a reader keeps
    each domain's parsed state tagged with the stamp it read before parsing, and uses it while
    the stamp still says the same. Why that is safe: a state read after seeing stamp V holds
    every commit up to V's; any later commit has a larger id, and its writer writes that id
    before its purge returns, so from then on no reader sees V and every one reads again. (Two
    writers may write their ids out of order: the stamp then moves back to an older id, which
    is still not V, and costs one more read.)"""

    def __init__(
        self, env: lmdb.Environment, stamp_path: Path, max_bytes: int = DEFAULT_MAX_BYTES
    ) -> None:
        self._env = env
        self.max_bytes = max_bytes
        self._parsed: dict[str, tuple[int, DomainState]] = {}
        fd = os.open(stamp_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            if os.fstat(fd).st_size < STAMP.size:
                os.ftruncate(fd, STAMP.size)
            self._stamp = mmap.mmap(fd, STAMP.size)
        finally:
            os.close(fd)

    def close(self) -> None:
        self._stamp.close()

    def current(self, domain: str) -> DomainState:
        """The domain's state as last committed (a fresh default if never purged), under the
        floor of the last distrust of every domain."""
        stamp: int = STAMP.unpack_from(self._stamp)[0]
        cached = self._parsed.get(domain)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        with self._env.begin(buffers=True) as txn:
            state = _read_state(txn, domain.encode())
        self._parsed[domain] = (stamp, state)
        return state

    def _update(self, domain: str, change: Any) -> int:
        """Apply ``change`` (DomainState -> number) to the domain's committed state in one
        synced write transaction, folding the state if it passes the budget, then announce it
        in the stamp; the new number."""
        key = domain.encode()
        with self._env.begin(write=True) as txn:
            record = txn.get(key)
            state = _read_state(txn, key)
            number: int = change(state)
            written = state.to_bytes()
            txn.put(key, written)
            if txn.get(TOTAL) is None:  # a directory from before the count: count it once
                total = sum(_sizes(txn).values())
            else:
                total = _count(txn, TOTAL) + len(written) - (0 if record is None else len(record))
            highest = state.number
            if total > self.max_bytes:
                total, folded = self._fold(txn)
                highest = max(highest, folded)
            txn.put(TOTAL, _COUNT.pack(total))
            txn.put(TOP, _COUNT.pack(max(_top(txn), highest)))
            committed = txn.id()
        STAMP.pack_into(self._stamp, 0, committed)
        return number

    def _fold(self, txn: lmdb.Transaction) -> tuple[int, int]:
        """Clear every domain over its fair share of the budget, in ``txn``: the new total,
        and the highest number it gave a domain. Rare (past the budget, the state is folded
        to 7/8 of it), and it reads the records' sizes only, and of a domain it clears only
        its number."""
        sizes = _sizes(txn)
        held = {domain: Held(remembered=0, outstanding=size) for domain, size in sizes.items()}
        folds = plan(held, self.max_bytes)
        floor, highest = _count(txn, FLOOR), 0
        for fold in folds:
            key = fold.domain.encode()
            state = DomainState(number=read_number(txn.get(key) or bytes(8))).floored(floor)
            highest = max(highest, state.clear())  # above the floor: covers entries after it
            written = state.to_bytes()
            txn.put(key, written)
            sizes[fold.domain] = len(written)
        txn.put(FOLDED, _COUNT.pack(_count(txn, FOLDED) + len(folds)))
        return sum(sizes.values()), highest  # recounted: a fold corrects the running total

    def distrust_all(self, made_for: bytes = b"") -> int:
        """Distrust every domain's entries, in one synced write (decision 0040): the floor.
        ``made_for`` names what it is for (a fleet member's epoch and number); a second call
        for the same non-empty one changes nothing (the other workers of the node, which learn
        of the same new epoch at the same number: the first one's floor is as good)."""
        with self._env.begin(write=True) as txn:
            floor = _count(txn, FLOOR)
            if made_for and txn.get(FLOOR_FOR) == made_for:
                return floor
            floor = max(_top(txn), floor) + 1
            txn.put(FLOOR, _COUNT.pack(floor))
            txn.put(TOP, _COUNT.pack(floor))
            txn.put(FLOOR_FOR, made_for)
            committed = txn.id()
        STAMP.pack_into(self._stamp, 0, committed)
        return floor

    def distrust(self, domain: str) -> int:
        """Distrust one domain's entries (synced): its new number."""
        return self._update(domain, DomainState.distrust)

    def usage(self) -> tuple[int, int]:
        """The records' bytes, and how many domains folds have cleared (for /metrics)."""
        with self._env.begin() as txn:
            return _count(txn, TOTAL), _count(txn, FOLDED)

    def clear(self, domain: str) -> int:
        return self._update(domain, DomainState.clear)

    def add(self, domain: str, purge: Purge, at: float) -> int:
        return self._update(domain, lambda state: state.add(purge, at))
