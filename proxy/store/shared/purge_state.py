"""The shared tier's purge state: durable before a purge returns, applied at every lookup.

Per domain one counter, the *purge number*, as the memory store's (decision 0024): every clear
and every purge moves it on. A fill takes the number its lookup saw as its entry's *mark*, and
an entry is judged at every lookup (``judge``):
- stored before the domain's last clear (``mark < cleared``): gone, whatever else;
- covered by a prefix ban, a tag purge or a URL purge numbered above its mark: gone (hard), or
  stale from the purge's time (soft). The matching rules are core's (``covering``, ``Bans``,
  ``LastPurges``); a URL purge is a ban of the exact request-target (either scheme).
Nothing on disk is visited at purge time. A URL purge is one record of its own in the URL
log (url_log.py, decision 0048), the others change the domain's small record (domain_state.py):
a purge costs O(its items), whatever the number of purges before it.

The records live in their own LMDB environment (``state/``), opened synced: a commit returns
after fsync, so a clear or a purge is on disk before the caller answers 200, and survives a
kill -9 and a power loss. Readers keep each domain's parsed state until a purge announces
itself in ``state/stamp`` (``PurgeStateStore``), so a lookup costs no transaction for it; then
they read its small record again and the URL log on from where they stopped.

Retention (decision 0037). Bans, tag and URL purges are kept until the domain's next clear, so
the records get a byte budget (``cache.purge_state_max_bytes``, the node's, not divided: one
tier per node). The bytes counted are the domains' records and their live URL log records
(``DomainState.held``; a record keeps its log's byte count), summed in a meta record
(``TOTAL``) kept by every write in its own transaction. A clear takes its domain's log out of
the count at once; its records are dropped by later writes (``url_log.sweep``). A purge
that takes the total over the budget also folds, in the same synced transaction:
``retention.plan`` over every domain's bytes (all *outstanding*, nothing
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

import logging
import mmap
import os
import struct
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import lmdb

from proxy.core.purge.purges import Purge
from proxy.core.purge.retention import DEFAULT_MAX_BYTES, Held, plan
from proxy.store.shared import url_log
from proxy.store.shared.domain_state import (
    DISTRUSTED,
    DomainState,
    distrusted_copy,
    judge,
)
from proxy.store.shared.node_writes import FleetBatch, NodeWrite
from proxy.store.shared.records import read_number

__all__ = ["DISTRUSTED", "DomainState", "PurgeStateStore", "distrusted_copy", "judge"]

logger = logging.getLogger("proxy.store")
STAMP = struct.Struct("<Q")  # state/stamp: the id of the last purge's transaction
UNREAD = -1  # a parsed state's stamp that no stamp equals: read again (``_seen``)
# Meta records beside the domains' (a domain name never starts with NUL): the records' bytes,
# and how many domains a fold has cleared.
TOTAL = b"\x00total"
FOLDED = b"\x00folded"
RETIRED = b"\x00retired"  # URLs whose purge records have retired (retire.py, decision 0059)
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
    """Every domain's bytes: its record's, and its live URL log's (the meta records and the
    log's skipped: their keys start with NUL)."""
    return {
        bytes(key).decode(): DomainState.from_bytes(value).held
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


def _read_state(
    txn: lmdb.Transaction, domain: str, known: DomainState | None = None, log: bool = True
) -> DomainState:
    """A domain's committed state, under the floor of the last distrust of every domain;
    with its URL log read into ``urls`` unless ``log`` is False (a writer's: it appends).
    ``known``: the state this process read before, whose URL table is read on from where it
    stopped when no clear came between (decision 0048): the table is shared, and grows in
    place, which any holder of the older state may see: only purges committed since, never
    fewer.

    Retired records (decision 0059) may stay in a table read on: they cover no entry that
    still exists, nor any fill not refused. The table is read anew past them only once it
    names over twice the URLs the live log does (``_read_anew``), so that a reader pays for a
    new table once per doubling, not at every retirement pass."""
    record = txn.get(domain.encode())
    state = DomainState() if record is None else DomainState.from_bytes(record)
    state.refuse, state.retired = url_log.retirement(txn, domain)
    if log and not state.legacy:
        if known is not None and known.cleared == state.cleared and not _read_anew(known, state):
            state.urls = known.urls
            start = known.read_to + 1
        else:  # a clear since, or a table of mostly retired URLs: without what they dropped
            start = max(state.cleared, state.retired) + 1
        if state.url_top >= start:
            corrupt = url_log.read(txn, domain, start, state.urls)
            if corrupt:  # unknown purges: a clear at its number, for this reader (never written)
                logger.warning(
                    "%s: URL purge record %d does not parse: read as a clear", domain, corrupt
                )
                state.cleared = max(state.cleared, corrupt)
    state.read_to = state.number
    floor = txn.get(FLOOR)
    return state if floor is None else state.floored(int(_COUNT.unpack(floor)[0]))


REBUILD_SLACK = 1024  # URLs a table may hold past twice the live log's before it is read anew


def _read_anew(known: DomainState, state: DomainState) -> bool:
    """Whether a reader's table should be read anew rather than on: records retired since it
    was read, and it names more than twice the URLs the live log does, plus a slack. (Read
    on, it misses only retired records, deleted: what they covered is gone already.)"""
    return known.retired != state.retired and (
        len(known.urls) > 2 * state.log_targets + REBUILD_SLACK
    )


def _migrate(txn: lmdb.Transaction, domain: str, state: DomainState) -> None:
    """A record of the first layout, about to be written in the second: its inline URL
    purges go to the URL log, one record per number, and whatever log records a downgrade
    left (all numbered at or under its ``cleared``) are buried."""
    numbered: dict[tuple[int, bool, float], list[str]] = {}
    for target, last in state.urls.items():
        if last.hard > state.cleared:
            numbered.setdefault((last.hard, False, 0.0), []).append(target)
        if last.soft > state.cleared:
            numbered.setdefault((last.soft, True, last.soft_at), []).append(target)
    for (number, soft, at), targets in sorted(numbered.items()):
        state.log_bytes += url_log.append(txn, domain, number, url_log.pack(soft, at, targets))
        state.log_targets += len(targets)
        state.url_top = max(state.url_top, number)
    url_log.bury(txn, domain, state.cleared)
    state.urls = {}
    state.legacy = False


@dataclass(frozen=True, slots=True)
class FleetWritten:
    """``PurgeStateStore.fleet_written``: the (epoch, number) the last distrust of every
    domain was made for, and the domain's fleet mark; None where the tier has none."""

    floor: tuple[str, int] | None
    mark: tuple[str, int] | None


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
    is still not V, and costs one more read.)

    That holds for what a process wrote itself. A process that finds its write made already
    by another (a fleet batch another worker wrote, ``apply_fleet``; a distrust of every
    domain made for the same, ``distrust_all``) may come between that writer's commit and its
    announcement, and then acks and serves on the strength of a commit the stamp does not yet
    show: it drops its parsed states first (``_seen``), so that its next lookup reads them
    again (the fleet checker found the lookup in that window handing a worker's memory tier
    an entry the purge covered, served after the purge's 200)."""

    def __init__(
        self, env: lmdb.Environment, stamp_path: Path, max_bytes: int = DEFAULT_MAX_BYTES
    ) -> None:
        self._env = env
        self.max_bytes = max_bytes
        # Each domain's state as parsed, with the stamp it was parsed at: current while the
        # stamp file (``stamp``) still says that stamp (``current``; read so by the shared
        # tier's fast path, ``TierReads.peek``, to save a call on every hit).
        self.parsed: dict[str, tuple[int, DomainState]] = {}
        # Catch-ups of one process (its event loop, its writer thread) one at a time: they
        # grow a domain's URL table in place.
        self._reading = threading.Lock()
        fd = os.open(stamp_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            if os.fstat(fd).st_size < STAMP.size:
                os.ftruncate(fd, STAMP.size)
            self.stamp = mmap.mmap(fd, STAMP.size)
        finally:
            os.close(fd)

    def close(self) -> None:
        self.stamp.close()

    def current(self, domain: str) -> DomainState:
        """The domain's state as last committed (a fresh default if never purged), under the
        floor of the last distrust of every domain. After a purge, read on from the state
        read before: O(purges since), not O(purges)."""
        stamp: int = STAMP.unpack_from(self.stamp)[0]
        cached = self.parsed.get(domain)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        with self._reading:
            cached = self.parsed.get(domain)
            if cached is not None and cached[0] == stamp:
                return cached[1]
            with self._env.begin(buffers=True) as txn:
                state = _read_state(txn, domain, None if cached is None else cached[1])
            self.parsed[domain] = (stamp, state)
        return state

    def fleet_written(self, domain: str) -> FleetWritten:
        """What the tier holds of the fleet for ``domain``, read now in a read transaction
        (never the parsed states, which may lag a commit another worker has not announced
        yet): the fleet position the last distrust of every domain was made for, and the
        domain's fleet mark (node_writes.py). An owner's answer a peer fill stores must cover
        both (edge/peer_fill.py): the fill's token may come from a lookup that already saw
        what the member has not applied yet."""
        with self._env.begin() as txn:
            made_for = bytes(txn.get(FLOOR_FOR) or b"")
            mark = _fleet_of(txn, domain)
        epoch, _, seq = made_for.decode(errors="replace").rpartition(" ")
        floor = (epoch, int(seq)) if epoch and seq.isdigit() else None
        return FleetWritten(floor, mark)

    def _seen(self, domains: Iterable[str] | None) -> None:
        """Another process's commit, seen by this one, covers a write it was about to make to
        ``domains`` (None: to every domain): their parsed states are read again at their next
        lookup, on from where they stopped (decision 0048), whatever the stamp says: the
        writer announces its commit only after it returns, maybe after this process's next
        lookup. Under ``_reading``: a read under way ends before, and is dropped."""
        with self._reading:
            stale = list(self.parsed) if domains is None else domains
            for domain in stale:
                cached = self.parsed.get(domain)
                if cached is not None:
                    self.parsed[domain] = (UNREAD, cached[1])

    def _update(self, domain: str, change: Change) -> int:
        """Apply ``change`` to the domain's committed state in one synced write transaction,
        folding the state if it passes the budget, then announce it in the stamp; the new
        number."""
        with self._env.begin(write=True) as txn:
            number = self._change(txn, domain, change)
            self._settle(txn, self._top_of(txn, domain))
            committed = txn.id()
        STAMP.pack_into(self.stamp, 0, committed)
        return number

    def _change(self, txn: lmdb.Transaction, domain: str, change: Change) -> int:
        """One change of a domain's state in ``txn``, counted in ``TOTAL``: its number. Its
        record is read without its URL log (a change appends to the log, never reads it)."""
        key = domain.encode()
        record = txn.get(key)
        state = _read_state(txn, domain, log=False)
        before = 0 if record is None else len(record) + state.log_bytes
        if state.legacy:
            _migrate(txn, domain, state)
        cleared, logged = state.cleared, state.log_bytes
        number = change(state, txn)
        if state.cleared != cleared and logged:  # a clear: the log's records are dead
            url_log.bury(txn, domain, state.cleared)
        txn.put(key, state.to_bytes())
        if txn.get(TOTAL) is None:  # a directory from before the count: count it once
            txn.put(TOTAL, _COUNT.pack(sum(_sizes(txn).values())))
        else:
            txn.put(TOTAL, _COUNT.pack(_count(txn, TOTAL) + state.held - before))
        return number

    def _top_of(self, txn: lmdb.Transaction, domain: str) -> int:
        record = txn.get(domain.encode())
        return 0 if record is None else read_number(record)

    def _settle(self, txn: lmdb.Transaction, highest: int) -> None:
        """The end of every write: fold past the budget, keep ``TOP``, drop some dead log
        records (decision 0048)."""
        total = _count(txn, TOTAL)
        if total > self.max_bytes:
            total, folded = self._fold(txn)
            highest = max(highest, folded)
            txn.put(TOTAL, _COUNT.pack(total))
        txn.put(TOP, _COUNT.pack(max(_top(txn), highest)))
        url_log.sweep(txn)

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
            record = txn.get(key)
            assert record is not None  # sized above, in this transaction
            was = DomainState.from_bytes(record)
            state = DomainState(number=was.number, fleet=was.fleet).floored(floor)
            highest = max(highest, state.clear())  # above the floor: covers entries after it
            url_log.bury(txn, fold.domain, state.cleared)
            txn.put(key, state.to_bytes())
            sizes[fold.domain] = state.held
        txn.put(FOLDED, _COUNT.pack(_count(txn, FOLDED) + len(folds)))
        return sum(sizes.values()), highest  # recounted: a fold corrects the running total

    def distrust_all(self, made_for: bytes = b"") -> int:
        """Distrust every domain's entries, in one synced write (decision 0040): the floor.
        ``made_for`` names what it is for (a fleet member's epoch and number); a second call
        for the same non-empty one changes nothing (the other workers of the node, which learn
        of the same new epoch at the same number: the first one's floor is as good)."""
        with self._env.begin(write=True) as txn:
            if made_for and txn.get(FLOOR_FOR) == made_for:
                floor = _count(txn, FLOOR)
                self._seen(None)
                return floor
            floor = _floor(txn, made_for)
            committed = txn.id()
        STAMP.pack_into(self.stamp, 0, committed)
        return floor

    def apply_fleet(self, batch: FleetBatch, at: float) -> int:
        """A fleet batch's writes, made once per node (node_writes.py), in one synced write
        transaction: how many of its parts were written (0: all were durable already, and
        no write transaction was committed). Soft purges are stamped ``at``."""
        grouped = batch.by_domain()
        made_for = batch.every.encode()
        with self._env.begin() as reading:  # first without the writer lock
            if (not made_for or reading.get(FLOOR_FOR) == made_for) and all(
                batch.done(_fleet_of(reading, d), writes) for d, writes in grouped.items()
            ):
                self._seen(None if made_for else grouped)
                return 0
        txn = self._env.begin(write=True)
        try:
            written, highest = 0, 0
            if made_for and txn.get(FLOOR_FOR) != made_for:
                _floor(txn, made_for)
                written += 1
            for domain, writes in grouped.items():
                if batch.done(_fleet_of(txn, domain), writes):
                    continue
                for write in writes:
                    self._change(txn, domain, _writing(domain, write, at))
                if batch.epoch is not None:
                    self._change(txn, domain, _marking(batch.epoch, batch.seq))
                highest = max(highest, self._top_of(txn, domain))
                written += 1
            if not written:
                txn.abort()
                self._seen(None if made_for else grouped)
                return 0
            self._settle(txn, highest)
            committed = txn.id()
            txn.commit()
        except BaseException:
            txn.abort()
            raise
        STAMP.pack_into(self.stamp, 0, committed)
        return written

    # -- retiring the URL log (retire.py, decision 0059) ----------------------------------------

    def refuse_floor(self, domain: str) -> int:
        """The number under which a fill's token is refused, read now in a read transaction
        (not the parsed state, which may lag a retirement's announcement): a fill asks it
        inside its entries write transaction (fill.py)."""
        with self._env.begin() as txn:
            return url_log.retirement(txn, domain)[0]

    def due(
        self, cutoff: float, limit: int, corrupt: list[tuple[str, int]] | None = None
    ) -> list[url_log.Due]:
        """The URL log records written at ``cutoff`` or before, at most ``limit`` targets;
        records that do not parse are added to ``corrupt`` (``url_log.due``)."""

        def start_of(domain: str) -> int | None:
            state = _read_state(txn, domain, log=False)
            return None if state.legacy else max(state.cleared, state.retired) + 1

        with self._env.begin() as txn:
            return url_log.due(txn, cutoff, limit, start_of, corrupt)

    def refuse(self, dues: Sequence[url_log.Due]) -> None:
        """Step one of a retirement: fills whose token is under a due record's number are
        refused from now on (synced, announced). The records stay, and still judge."""
        with self._env.begin(write=True) as txn:
            for due in dues:
                url_log.set_retirement(txn, due.domain, due.upto, 0)
            committed = txn.id()
        STAMP.pack_into(self.stamp, 0, committed)

    def retire(self, dues: Sequence[url_log.Due]) -> int:
        """The last step, once the entries the records cover are gone: the records go, out of
        the budget, and readers start past them (synced, announced). Records a clear buried
        since are left to the sweep. The bytes freed."""
        freed = 0

        def dropping(due: url_log.Due) -> Change:
            def change(state: DomainState, txn: lmdb.Transaction) -> int:
                nonlocal freed
                start = max(state.cleared, state.retired) + 1
                if due.upto >= start:
                    gone, targets = url_log.remove(txn, due.domain, start, due.upto)
                    state.log_bytes = max(0, state.log_bytes - gone)
                    state.log_targets = max(0, state.log_targets - targets)
                    freed += gone
                url_log.set_retirement(txn, due.domain, due.upto, due.upto)
                return state.number

            return change

        with self._env.begin(write=True) as txn:
            for due in dues:
                self._change(txn, due.domain, dropping(due))
            retired = sum(len(due.covers) for due in dues)
            txn.put(RETIRED, _COUNT.pack(_count(txn, RETIRED) + retired))
            self._settle(txn, 0)
            committed = txn.id()
        STAMP.pack_into(self.stamp, 0, committed)
        return freed

    def distrust(self, domain: str) -> int:
        """Distrust one domain's entries (synced): its new number."""
        return self._update(domain, lambda state, txn: state.distrust())

    def usage(self) -> tuple[int, int, int]:
        """The purge state's bytes (records and live URL logs), how many domains folds have
        cleared, and how many URLs' purge records have retired (for /metrics)."""
        with self._env.begin() as txn:
            return _count(txn, TOTAL), _count(txn, FOLDED), _count(txn, RETIRED)

    def clear(self, domain: str) -> int:
        return self._update(domain, lambda state, txn: state.clear())

    def add(self, domain: str, purge: Purge, at: float) -> int:
        return self._update(domain, _adding(domain, purge, at))

    def add_many(self, domain: str, purges: Sequence[Purge], at: float) -> int:
        """Several purges of one domain in one synced write (a bulk load: the benchmark's):
        the last one's number."""

        def change(state: DomainState, txn: lmdb.Transaction) -> int:
            number = state.number
            for purge in purges:
                number = _adding(domain, purge, at)(state, txn)
            return number

        return self._update(domain, change)


Change = Callable[[DomainState, lmdb.Transaction], int]


def _floor(txn: lmdb.Transaction, made_for: bytes) -> int:
    """A new distrust floor of every domain, in ``txn``: above every number any domain's
    record has held, so every mark given out so far is under it."""
    floor = max(_top(txn), _count(txn, FLOOR)) + 1
    txn.put(FLOOR, _COUNT.pack(floor))
    txn.put(TOP, _COUNT.pack(floor))
    txn.put(FLOOR_FOR, made_for)
    return floor


def _fleet_of(txn: lmdb.Transaction, domain: str) -> tuple[str, int] | None:
    """The domain's fleet mark (node_writes.py), None when it has none."""
    record = txn.get(domain.encode())
    return None if record is None else DomainState.from_bytes(record).fleet


def _writing(domain: str, write: NodeWrite, at: float) -> Change:
    if write.distrust:
        return lambda state, txn: state.distrust()
    if write.purge is None or (write.purge.kind == "all" and not write.purge.soft):
        return lambda state, txn: state.clear()
    return _adding(domain, write.purge, at)


def _marking(epoch: str, seq: int) -> Change:
    def change(state: DomainState, txn: lmdb.Transaction) -> int:
        state.fleet = (epoch, seq)
        return state.number

    return change


def _adding(domain: str, purge: Purge, at: float) -> Change:
    """The change that records ``purge`` (not a hard ``all``): a URL purge as one record of
    the URL log, the others in the domain's record."""
    if purge.kind != "url":
        return lambda state, txn: state.add(purge, at)

    def change(state: DomainState, txn: lmdb.Transaction) -> int:
        number = state.add_url(purge)
        value = url_log.pack(purge.soft, at, purge.items)
        state.log_bytes += url_log.append(txn, domain, number, value)
        state.log_targets += len(purge.items)
        return number

    return change
