"""The audit journal: every audit record is on disk before its clear is answered.

SQLite is written behind the answer, in batches (``async_state.AsyncState``): one transaction per
clear cost the edge's core more than the clear itself (decision 0010). A process killed in
that window lost the records of clears it had already confirmed. So each record is first
appended to this journal, with one ``write()`` on an ``O_APPEND`` file descriptor, before the
answer goes out; the batch then copies it into SQLite, and once SQLite has a segment's every
record the segment is deleted. At start, whatever segments remain are replayed into SQLite
(``StateDB.write_batch`` ignores a record whose ``journal_id`` it already has, so a segment
replayed after a crash between the commit and the delete is stored once).

What survives what (decision 0016):

- A crash of the process (``kill -9``, an exception, the OOM killer): everything written. The
  kernel has the bytes in its page cache once ``write()`` returns.
- A power loss or a kernel crash: only what the kernel had written back to the disk, unless
  ``state.audit_fsync`` makes each record wait for ``fdatasync`` (off the event loop) before
  its answer.

Format: one JSON array per line (proxy/wire/journal.py: its version tag, ``audit/2``, then the
record's fields in ``AuditRecord`` order, its journal id last), in segment files ``<seq>.jsonl``
(seq: 12 digits, growing) in the directory ``<state db>.audit-journal``. A line that is cut
short (no newline: the process died inside ``write()``, or the power went) is ignored, with
a warning.

A segment is retired (a new one started) once it holds ROTATE_BYTES, and deleted once every
record written to it is in SQLite; a clean close deletes the last one too. A batch that
fails leaves its segments for the next start. The directory is locked (``flock``) so that
two servers never share a journal.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import logging
import operator
import os
import re
import secrets
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from proxy.errors import StateError, WireError
from proxy.state.sqlite import AuditRecord, StateDB
from proxy.wire.journal import AUDIT_FIELDS, pack_audit, unpack_audit

log = logging.getLogger("proxy.state")

SUFFIX = ".audit-journal"
REPLAY_BATCH = 1000  # records per transaction when replaying
# A segment is retired once it holds this much: a new file per batch would cost an open, a
# close and an unlink every 50 ms under load. Replaying a whole one after a crash stores
# only what SQLite lacks.
ROTATE_BYTES = 1024 * 1024
_SEGMENT = re.compile(r"([0-9]{12})\.jsonl")
_FIELDS = tuple(field.name for field in dataclasses.fields(AuditRecord))
assert _FIELDS == AUDIT_FIELDS, "a journal line's fields are the record's (proxy/wire/journal.py)"
_VALUES = operator.attrgetter(*_FIELDS[:-1])  # every field but journal_id, in order


def journal_directory(db_path: Path) -> Path:
    """Where the journal of the state database at ``db_path`` lives: beside it."""
    return db_path.with_name(db_path.name + SUFFIX)


def with_id(record: AuditRecord, journal_id: str) -> tuple[AuditRecord, bytes]:
    """``record`` given ``journal_id``, and its journal line. ASCII-only JSON: a lone
    surrogate from a client's body survives the round trip."""
    values = _VALUES(record)
    return AuditRecord(*(*values, journal_id)), pack_audit(values, journal_id)


def encode(record: AuditRecord) -> bytes:
    """The journal line of a record that has its journal id."""
    assert record.journal_id is not None
    return with_id(record, record.journal_id)[1]


def decode(line: bytes) -> AuditRecord:
    """The record of one journal line; WireError if it is not one."""
    return AuditRecord(*unpack_audit(line))


def read_segment(path: Path) -> list[AuditRecord]:
    """The whole records of one segment, in order. A last line cut short is left out, and
    a line that cannot be read is logged and left out: the others are still records."""
    data = path.read_bytes()
    lines = data.split(b"\n")
    if lines[-1]:
        log.warning("audit journal %s: its last line was cut short; ignored", path)
    records = []
    for number, line in enumerate(lines[:-1], start=1):
        try:
            records.append(decode(line))
        except WireError as exc:
            log.error("audit journal %s line %d is damaged (%s); ignored", path, number, exc)
    return records


def replay(db: StateDB, paths: Iterable[Path]) -> int:
    """Copy the records of ``paths`` (segments of an earlier run, oldest first) into ``db``
    and delete each segment once it is in; return how many records were read. Records
    already there are not stored again. On the state thread: it is ``db``'s."""
    count = 0
    for path in paths:
        records = read_segment(path)
        for start in range(0, len(records), REPLAY_BATCH):
            db.write_batch({}, records[start : start + REPLAY_BATCH])
        count += len(records)
        path.unlink(missing_ok=True)
    return count


@dataclass(eq=False, slots=True)
class Segment:
    """One journal file. ``unsettled`` counts its records not yet known to be in SQLite."""

    path: Path
    fd: int
    unsettled: int = 0
    size: int = 0  # bytes written or being written
    retired: bool = False


class AuditJournal:
    """The journal of one state database, owned by one server process."""

    def __init__(
        self,
        directory: Path,
        lock_fd: int,
        *,
        fsync: bool,
        next_seq: int,
        rotate_bytes: int = ROTATE_BYTES,
    ) -> None:
        self.directory = directory
        self.fsync = fsync
        self._rotate_bytes = rotate_bytes
        self._lock_fd = lock_fd
        self._next_seq = next_seq
        self._prefix = secrets.token_hex(6)  # this run's: ids never repeat across restarts
        self._count = 0
        self._segments: list[Segment] = []
        self._current = self._new_segment()

    @classmethod
    def open(
        cls, db_path: Path, *, fsync: bool = False, rotate_bytes: int = ROTATE_BYTES
    ) -> tuple[AuditJournal, list[Path]]:
        """Lock the journal, and list the segments a previous run left (for ``replay``).
        StateError if it cannot be used."""
        directory = journal_directory(db_path)
        try:
            directory.mkdir(mode=0o700, exist_ok=True)
            lock_fd = os.open(directory / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise StateError(f"cannot open the audit journal {directory}: {exc}") from None
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(lock_fd)
            raise StateError(
                f"the audit journal {directory} is in use by another process: two servers"
                " cannot share one state database"
            ) from None
        left = sorted(path for path in directory.iterdir() if _SEGMENT.fullmatch(path.name))
        next_seq = int(left[-1].name[:12]) + 1 if left else 1
        try:
            journal = cls(
                directory, lock_fd, fsync=fsync, next_seq=next_seq, rotate_bytes=rotate_bytes
            )
        except BaseException:
            os.close(lock_fd)
            raise
        return journal, left

    def append(self, record: AuditRecord) -> tuple[AuditRecord, Segment]:
        """Write ``record`` (given its journal id) to the current segment; return it and the
        segment, which ``settle`` must be told about once SQLite has the record."""
        record, segment, line = self.prepare(record)
        self.write(segment, line)
        return record, segment

    def prepare(self, record: AuditRecord) -> tuple[AuditRecord, Segment, bytes]:
        """``append`` without the write, for a caller that writes on another thread: the
        segment counts the record from now, so it is neither closed nor deleted before."""
        self._count += 1
        record, line = with_id(record, f"{self._prefix}.{self._count}")
        segment = self._current
        segment.unsettled += 1
        segment.size += len(line)
        return record, segment, line

    def write(self, segment: Segment, line: bytes) -> None:
        """One ``write()`` (O_APPEND: concurrent writers never interleave within a line), and
        ``fdatasync`` when the journal is configured to. OSError if the disk refused it."""
        written = os.write(segment.fd, line)
        if written != len(line):  # only a full disk does this to a regular file
            raise OSError(f"wrote {written} of {len(line)} bytes")
        if self.fsync:
            os.fdatasync(segment.fd)

    def rotate(self) -> None:
        """Start a new segment for the records that follow, if the current one is full
        (called as a batch is taken)."""
        if self._current.size < self._rotate_bytes:
            return
        self._current.retired = True
        self._drop_if_settled(self._current)
        self._current = self._new_segment()

    def settle(self, segments: Iterable[Segment]) -> None:
        """SQLite now has one record of each of ``segments`` (one entry per record)."""
        for segment in segments:
            segment.unsettled -= 1
            self._drop_if_settled(segment)

    def close(self) -> None:
        """Close every file; delete the segments SQLite has all of, keep the others."""
        for segment in list(self._segments):
            segment.retired = True
            self._drop_if_settled(segment)
        for segment in self._segments:
            os.close(segment.fd)
        self._segments.clear()
        os.close(self._lock_fd)

    def segments(self) -> Iterator[Path]:
        """The segments on disk now, oldest first."""
        return iter(
            sorted(path for path in self.directory.iterdir() if _SEGMENT.fullmatch(path.name))
        )

    def _new_segment(self) -> Segment:
        path = self.directory / f"{self._next_seq:012d}.jsonl"
        self._next_seq += 1
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
        try:
            segment = Segment(path, os.open(path, flags, 0o600))
        except OSError as exc:
            raise StateError(f"cannot open the audit journal {path}: {exc}") from None
        self._segments.append(segment)
        return segment

    def _drop_if_settled(self, segment: Segment) -> None:
        if not (segment.retired and segment.unsettled == 0):
            return
        self._segments.remove(segment)
        os.close(segment.fd)
        with contextlib.suppress(FileNotFoundError):
            segment.path.unlink()
