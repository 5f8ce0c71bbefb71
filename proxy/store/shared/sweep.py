"""The sweep: body files no record names are removed, in the background (issue 31 §5).

A fill renames its body file to ``bodies/<sequence>.body`` inside its write transaction and
then commits; a commit that replaces or evicts entries unlinks their files after it commits.
A process killed between the two leaves a file no record names: an orphan, never served,
never counted in the tier's size, and never removed by eviction. A worker killed mid-fill
leaves its temporary file in ``bodies/tmp/``, which the node empties only when it starts.
And the body files of a cleared domain's entries stay until eviction reaches them.

So the node (the directory's lock holder: one sweeper per node) walks ``bodies/``, as nginx's
cache loader walks its tree: a pass looks at PASS_NAMES names at most (bounded I/O), then
pauses; a whole walk done, it waits ROUND_PAUSE and walks again (the first walk starts when
the node opens the directory, so a crash's orphans go soon after the restart). For each name:

- ``tmp/<owner>.<random>.tmp``: removed when its writer (owners.py: pid, start time and boot)
  no longer runs; so is a fill marker (``fills/``, markers.py) whose owner no longer runs
  (not counted: a marker holds no body);
- ``<sequence>.body``: judged in a write transaction, which holds LMDB's writer lock, so no
  fill of any process is between its rename and its commit: removed unless a committed record
  names it (the ``order`` database's key for the sequence, whose record holds that sequence
  and a body file); and an entry a clear of its domain covers is removed with its file.

What it removes is counted in the entries' meta (every process reads it: ``SharedStats``):
``orphans`` files and ``orphan-bytes``, and ``swept`` entries of cleared domains.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import struct
from collections.abc import Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import lmdb

from proxy.store.shared import owners
from proxy.store.shared.bodies import TMP, sequence_of, tmp_owner
from proxy.store.shared.markers import FILLS
from proxy.store.shared.records import EntryHeader, read_header
from proxy.store.shared.tier import SharedTier
from proxy.store.shared.totals import Totals
from proxy.store.shared.upkeep import node_task

PASS_NAMES = 128  # names judged per pass: at most that many unlinks under the writer lock
PASS_PAUSE = 0.05  # seconds between passes: a 100k-file tier is walked in about 40 s
ROUND_PAUSE = 30.0  # seconds between two walks
ORPHANS, ORPHAN_BYTES, SWEPT = b"orphans", b"orphan-bytes", b"swept"
_U64 = struct.Struct(">Q")


class Sweep:
    """Walks of the tier's ``bodies/``, one pass per ``step``. In the writer thread."""

    def __init__(self, tier: SharedTier, names: int = PASS_NAMES) -> None:
        self._tier = tier
        self._names = names
        self._walk: Iterator[Path] | None = None
        self._markers = tier.directory / FILLS

    def step(self) -> bool:
        """Judge the walk's next names: True when the walk has ended (the next starts over)."""
        if self._walk is None:
            self._walk = _walk(self._tier.bodies, self._markers)
        batch = list(itertools.islice(self._walk, self._names))
        ended = len(batch) < self._names
        if ended:
            self._walk = None
        try:
            self._judge(batch)
        except (lmdb.Error, OSError) as error:  # reported, never raised
            self._tier.health.fault("sweep", error)
        return ended

    def round(self) -> None:
        """A whole walk, at once (a test's, or a benchmark's)."""
        while not self.step():
            pass

    def _judge(self, batch: list[Path]) -> None:
        orphans = orphan_bytes = 0
        files: list[tuple[int, Path]] = []
        for path in batch:
            if path.parent == self._markers:
                _unmark(path)
                continue
            if path.parent.name == TMP and path.parent.parent == self._tier.bodies:
                if not owners.alive(tmp_owner(path.name)):
                    orphans, orphan_bytes = orphans + 1, orphan_bytes + _unlink(path)
                continue
            sequence = sequence_of(path.name)
            if sequence is not None:
                files.append((sequence, path))
        tier = self._tier
        gone: list[str] = []
        with tier.writing() as (txn, _):
            totals = Totals(txn, tier)
            swept = 0
            for sequence, path in files:
                key = txn.get(_U64.pack(sequence), db=tier.db_order)
                record = None if key is None else txn.get(key, db=tier.db_entries)
                header = None if record is None else _header(record)
                if header is CORRUPT:  # lookups remove the record, and the next walk its file
                    continue
                if key is None or header is None or header.sequence != sequence:
                    header = None  # no committed record names the file
                if key is None or header is None or not header.in_file:
                    orphans, orphan_bytes = orphans + 1, orphan_bytes + _unlink(path)
                    continue
                domain = bytes(key).split(b" ", 1)[0].decode(errors="replace")
                if header.mark < tier.purges.current(domain).cleared:
                    swept += totals.remove(bytes(key), sequence, gone)
            if orphans or swept:
                totals.save()
                for name, count in ((ORPHANS, orphans), (ORPHAN_BYTES, orphan_bytes)):
                    _add(txn, tier, name, count)
                _add(txn, tier, SWEPT, swept)
        for gone_name in gone:
            (tier.bodies / gone_name).unlink(missing_ok=True)


def held(tier: SharedTier, domain: str) -> int:
    """How many entries of the domain are stored that no clear covers yet: what a clear now
    would drop, for its audit record (a read of the domain's keys, which LMDB keeps together:
    "<domain> <target>..."; in the writer thread). 0 on a fault."""
    prefix = f"{domain} ".encode()
    count = 0
    try:
        cleared = tier.purges.current(domain).cleared
        with tier.reading() as txn:
            cursor = txn.cursor(tier.db_entries)
            if not cursor.set_range(prefix):
                return 0
            for key, value in cursor:
                if bytes(key[: len(prefix)]) != prefix:
                    break
                count += _header(value).mark >= cleared
    except (lmdb.Error, OSError) as error:
        tier.health.fault("count", error)
        return 0
    return count


CORRUPT = EntryHeader(0, 0, 0, -1, 0)  # a record that does not parse: left to the lookups


def _header(record: bytes | memoryview) -> EntryHeader:
    try:
        return read_header(record)
    except Exception:  # Corrupt, or what a torn record raises
        return CORRUPT


def _walk(bodies: Path, markers: Path) -> Iterator[Path]:
    """The markers, ``bodies/tmp/``'s files, then ``bodies/``'s, read from the directories as
    they go."""
    for directory in (markers, bodies / TMP, bodies):
        with contextlib.suppress(OSError), os.scandir(directory) as names:
            for entry in names:
                if not entry.name.startswith(".") and entry.is_file(follow_symlinks=False):
                    yield Path(entry.path)


def _unmark(path: Path) -> None:
    """Remove a fill marker whose owner no longer runs (a worker killed mid-fill). A claim
    may replace it in between: that claim's marker then goes, which costs one collapsed
    fill, never a wrong answer (markers are advisory)."""
    try:
        owner = path.read_text().partition(" ")[0]
        if not owners.alive(owner):
            path.unlink()
    except OSError:
        pass


def _unlink(path: Path) -> int:
    """Remove the file: its size (0 when it was gone already)."""
    try:
        size = path.stat().st_size
        path.unlink()
    except FileNotFoundError:
        return 0
    return size


def _add(txn: lmdb.Transaction, tier: SharedTier, name: bytes, count: int) -> None:
    if not count:
        return
    value = txn.get(name, db=tier.db_meta)
    total = (0 if value is None else int(_U64.unpack(value)[0])) + count
    txn.put(name, _U64.pack(total), db=tier.db_meta)


async def _sweeping(tier: SharedTier, pass_pause: float, round_pause: float) -> None:
    sweep = Sweep(tier)
    while True:
        ended = await tier.run(sweep.step)
        await asyncio.sleep(round_pause if ended else pass_pause)


def sweeping(
    tier: SharedTier, *, pass_pause: float = PASS_PAUSE, round_pause: float = ROUND_PAUSE
) -> AbstractAsyncContextManager[None]:
    """The node's sweep of ``tier``, in its writer thread, until the block ends. Only the
    node holding the directory sweeps (its workers do not)."""
    return node_task(tier, lambda: _sweeping(tier, pass_pause, round_pause), "sweep")
