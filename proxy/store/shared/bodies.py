"""Large bodies as files (decision 0030): written in a stream, read back chunk by checked chunk.

A body over INLINE_MAX bytes is written into ``bodies/tmp/<random>.tmp`` as it arrives, then,
once whole, followed by its chunk table (one CRC32 per CHUNK bytes of the body) and renamed to
``bodies/<sequence>.body``. The entry record naming it is committed after the rename, so a
writer killed at any point leaves at most an orphan file and no record: a miss. The node
empties ``bodies/tmp/`` when it opens the directory (no fill can be under way then); while it
runs, its sweep (sweep.py) removes the files of a worker killed mid-fill, which each name
their writer (``tmp_name``: owners.py), and the renamed files no committed record names.

A reader checks every chunk it reads against the table, and the table against the CRC the
entry record holds: a torn write, a flipped bit or a truncated file is never handed on
(``BodyCorrupt``). Range reads (``chunks(start, end)``) seek to the first chunk they need.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path

from proxy.errors import BodyCorrupt
from proxy.store.shared import owners

CHUNK = 64 * 1024
INLINE_MAX = CHUNK  # bodies up to this are kept in the entry record
TMP = "tmp"  # bodies being written, in a directory of their own
_CRC = struct.Struct("<I")
SUFFIX = ".body"


def tmp_name() -> str:
    """A new temporary body's name: its writer (owners.py), then a random part."""
    return f"{owners.me()}.{secrets.token_hex(8)}.tmp"


def tmp_owner(name: str) -> str:
    """The writer a temporary body's name holds ("" when it holds none)."""
    parts = name.split(".")
    return ".".join(parts[:3]) if len(parts) == 5 and parts[4] == "tmp" else ""


def sequence_of(name: str) -> int | None:
    """The sequence a body file's name holds (``body_name``), None for another name."""
    if not name.endswith(SUFFIX) or len(name) != 16 + len(SUFFIX):
        return None
    try:
        return int(name[:16], 16)
    except ValueError:
        return None


class BodyWriter:
    """One body being written to a temporary file. Not thread-safe: one fill's thread."""

    def __init__(self, directory: Path) -> None:
        self._directory = directory
        self.tmp = directory / TMP / tmp_name()
        self._fd = os.open(self.tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        self.length = 0
        self._crcs: list[int] = []
        self._crc = 0  # of the chunk being written
        self._filled = 0  # its bytes so far

    def write(self, data: bytes | memoryview) -> None:
        view = memoryview(data)
        while view:
            room = CHUNK - self._filled
            part = view[:room]
            self._crc = zlib.crc32(part, self._crc)
            self._filled += len(part)
            if self._filled == CHUNK:
                self._crcs.append(self._crc)
                self._crc = self._filled = 0
            view = view[room:]
        written = 0
        while written < len(data):
            written += os.write(self._fd, memoryview(data)[written:])
        self.length += len(data)

    def finish(self, sequence: int) -> tuple[Path, int]:
        """Write the chunk table, close and rename the file; its path and the table's CRC."""
        if self._filled:
            self._crcs.append(self._crc)
        table = b"".join(_CRC.pack(crc) for crc in self._crcs)
        os.write(self._fd, table)
        os.close(self._fd)
        self._fd = -1
        final = self._directory / f"{sequence:016x}.body"
        os.replace(self.tmp, final)
        return final, zlib.crc32(table)

    def abort(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        with contextlib.suppress(OSError):
            self.tmp.unlink()


class LinkedBody(BodyWriter):
    """A stored body file carried over to a new entry of the same body (a large object
    refreshed by a 304: decision 0039): hard-linked into ``tmp/``, then renamed as a new
    body is. Its bytes and chunk table are the file's own (nothing more can be written);
    the table's CRC is the old record's."""

    def __init__(self, directory: Path, source: Path, table_crc: int) -> None:
        self._directory = directory
        self.tmp = directory / TMP / tmp_name()
        os.link(source, self.tmp)
        self._fd = -1
        self.length = os.stat(self.tmp).st_size
        self._table_crc = table_crc

    def write(self, data: bytes | memoryview) -> None:
        raise OSError("a linked body is whole: nothing is appended to it")

    def finish(self, sequence: int) -> tuple[Path, int]:
        final = self._directory / f"{sequence:016x}.body"
        os.replace(self.tmp, final)
        return final, self._table_crc

    def abort(self) -> None:
        with contextlib.suppress(OSError):
            self.tmp.unlink()


def chunks(
    path: Path, length: int, table_crc: int, start: int = 0, end: int | None = None
) -> Iterator[bytes]:
    """The body's bytes from ``start`` up to ``end`` (exclusive; None: its end), in pieces of
    at most CHUNK bytes, each checked before it is yielded. BodyCorrupt when one fails, or
    when the file is missing or shorter than it must be."""
    end = length if end is None else min(end, length)
    if start >= end:
        return
    count = -(-length // CHUNK)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as error:
        raise BodyCorrupt(f"{path.name}: {error.strerror}") from None
    try:
        table = os.pread(fd, 4 * count, length)
        if len(table) != 4 * count or zlib.crc32(table) != table_crc:
            raise BodyCorrupt(f"{path.name}: chunk table does not match its record")
        index = start // CHUNK
        while index * CHUNK < end:
            offset = index * CHUNK
            size = min(CHUNK, length - offset)
            data = os.pread(fd, size, offset)
            if len(data) != size or zlib.crc32(data) != _CRC.unpack_from(table, 4 * index)[0]:
                raise BodyCorrupt(f"{path.name}: chunk {index} does not match its checksum")
            low = max(start - offset, 0)
            high = min(end - offset, size)
            yield data if (low, high) == (0, size) else data[low:high]
            index += 1
    finally:
        os.close(fd)


class Verified:
    """Body files this process has seen whole and matching their chunk table: written by its
    own fill (the CRCs were taken of the bytes written) or read through once, every chunk
    checked. A hit of one of them may be sent without checking its chunks again, by
    ``sendfile`` or plain reads (decision 0039), as long as the file is still the one
    checked: the same inode, size and modification time (``identity``), which an in-place
    write changes. Bounded: a body forgotten is checked again on its next send."""

    __slots__ = ("_seen", "limit", "sendfile")

    def __init__(self, limit: int = 4096, *, sendfile: bool = False) -> None:
        self._seen: dict[tuple[int, int, int], None] = {}
        self.limit = limit
        # How a verified body is sent on plain HTTP/1.1: sendfile, or reads and writes without
        # checking its chunks again ([cache] sendfile).
        self.sendfile = sendfile

    def add(self, stat: os.stat_result) -> None:
        seen = self._seen
        seen[identity(stat)] = None
        if len(seen) > self.limit:
            del seen[next(iter(seen))]

    def __contains__(self, stat: os.stat_result) -> bool:
        return identity(stat) in self._seen


def identity(stat: os.stat_result) -> tuple[int, int, int]:
    return (stat.st_ino, stat.st_size, stat.st_mtime_ns)
