"""Large objects of the shared tier as the edge serves them: by their body file (decision 0039).

A lookup (``TieredStore.lookup``) hands the edge an entry whose body is larger than the memory
tier's share for one object as a ``FileBacked`` response: its metadata, with an empty
``body``, and the ``BodyFile`` that holds the body. Nothing of the body is read at lookup; the
edge sends it from the file (edge/file_body.py):

- by ``sendfile`` from an open descriptor when the process has already seen that very file
  whole and matching its checksums (``Verified``: its own fill wrote it, or an earlier send
  read every chunk through), and the connection allows it (plain HTTP/1.1);
- otherwise read chunk by checked chunk (``read``: ``SharedTier.read_body``, which seeks to the
  first chunk a range needs), a batch at a time in a thread. A chunk that fails its checksum
  stops the send before it is handed on, and the entry is removed.

``FileBacked`` refuses ``dataclasses.replace`` (its constructor takes the file): a copy of it
with an empty body could otherwise be stored or served as if it were whole.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from dataclasses import dataclass, replace
from typing import Any

from proxy.core.cache.entry import StoredResponse
from proxy.store.shared.bodies import CHUNK, Verified
from proxy.store.shared.tier import SharedEntry, SharedTier

BATCH = 16  # chunks read per trip to a thread when a body is read and checked (1 MiB)


@dataclass(frozen=True, slots=True)
class BodyFile:
    """One stored body in a file of the shared tier."""

    entry: SharedEntry
    tier: SharedTier
    verified: Verified  # the process's record of files already checked whole

    @property
    def length(self) -> int:
        return self.entry.length

    def open(self) -> tuple[int, os.stat_result]:
        """A descriptor of the file and its state, for ``sendfile``. OSError when it is gone."""
        assert self.entry.path is not None
        fd = os.open(self.entry.path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            return fd, os.fstat(fd)
        except OSError:
            os.close(fd)
            raise

    def read(self, start: int, end: int) -> Generator[list[bytes], None, None]:
        """The bytes ``start`` to ``end`` (exclusive), checked, in batches of up to BATCH
        chunks (call ``next`` in a thread). BodyCorrupt before a bad chunk is handed on."""
        batch: list[bytes] = []
        for piece in self.tier.read_body(self.entry, start, end):
            batch.append(piece)
            if len(batch) == BATCH:
                yield batch
                batch = []
        if batch:
            yield batch

    def checked_whole(self, stat: os.stat_result) -> None:
        """Every chunk of the file ``stat`` describes was read and matched its checksum."""
        self.verified.add(stat)


class FileBacked(StoredResponse):
    """A stored response whose body is in a shared-tier file (``file``); ``body`` is empty."""

    __slots__ = ("file",)
    file: BodyFile

    def __init__(self, response: StoredResponse, file: BodyFile) -> None:
        set_ = object.__setattr__
        for slot in StoredResponse.__slots__:
            set_(self, slot, getattr(response, slot))
        set_(self, "file", file)

    @property
    def size(self) -> int:
        """What it would cost the memory tier: its whole body (never kept there)."""
        return self.file.length + CHUNK

    def metadata(self) -> StoredResponse:
        """The same response as a plain entry, with its empty body (to derive another from:
        ``replaced``)."""
        plain = object.__new__(StoredResponse)
        for slot in StoredResponse.__slots__:
            object.__setattr__(plain, slot, getattr(self, slot))
        return plain


def replaced(response: StoredResponse, **changes: Any) -> StoredResponse:
    """``dataclasses.replace`` that keeps a large object's body file."""
    if isinstance(response, FileBacked):
        return FileBacked(replace(response.metadata(), **changes), response.file)
    return replace(response, **changes)


def file_backed(response: StoredResponse) -> BodyFile | None:
    """The body file of a response whose body is in the shared tier, else None."""
    return response.file if isinstance(response, FileBacked) else None
