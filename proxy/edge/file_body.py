"""Sending a body stored in a shared-tier file: zero copy where it may, checked where it must
(decision 0039).

``FilePayload`` is the body of the ``web.Response`` a hit of a large object builds
(respond.from_stored, and ranges.answer for a 206): aiohttp sets Content-Length from its size
and calls ``write`` once the head is written. It sends the bytes ``start`` to ``end`` of the
file in one of three ways:

- **sendfile**, straight from the page cache to the socket, when ``[cache] sendfile`` is on,
  the connection is plain HTTP/1.1 (not TLS, not HTTP/2, no transfer coding) and the file is
  one this process has already checked whole (``Verified``: the same inode, size and
  modification time). The
  socket is the transport's own, written through a duplicate descriptor (uvloop implements
  no ``loop.sendfile``): only while the transport has nothing buffered, and when the socket
  is full, the loop is asked to say when it is writable again (``add_writer`` on the
  duplicate: the transport's own descriptor is not ours to watch).
- **reads**, for any other connection, of a file already checked whole: 256 KiB slices read
  and written as any body, the chunks not checked again. This is the default on plain
  HTTP/1.1 too: on this machine's loopback, 1 MiB hits by reads reach 1.1x nginx's req/s
  (its default, ``sendfile off``), by sendfile 0.6x, as nginx's own ``sendfile on`` does
  (decision 0039).
- **checked reads** of a file not checked yet: a batch of chunks at a time read in a thread,
  each checked against its CRC (``BodyFile.read``), then written as any body. A read of the
  whole body that checks out marks the file verified for the next hits in this process.

A chunk that fails its checksum, or a file shorter than its record, is never sent: the
connection is aborted (an HTTP/2 stream is reset), so the client sees a body cut short,
never one that ends cleanly with bytes missing or wrong.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from typing import Any

from aiohttp.abc import AbstractStreamWriter
from aiohttp.http_writer import StreamWriter
from aiohttp.payload import Payload

from proxy.edge.aiohttp_adapter import plain_writer, sent_beside
from proxy.errors import BodyCorrupt
from proxy.store.shared.large import BodyFile

SENDFILE_MAX = 1 << 20  # bytes per sendfile call: the loop serves others in between
READ_SLICE = 256 * 1024  # bytes per read of a verified file sent without sendfile


class FilePayload(Payload):
    """The bytes ``start`` to ``end`` (exclusive) of a stored body file."""

    def __init__(self, file: BodyFile, start: int = 0, end: int | None = None) -> None:
        super().__init__(file, content_type=None)
        self.file = file
        self.start = start
        self.end = file.length if end is None else end
        self._size = self.end - self.start

    def part(self, first: int, last: int) -> FilePayload:
        """The bytes ``first`` to ``last`` (inclusive) of the body: a range's payload."""
        return FilePayload(self.file, first, last + 1)

    def decode(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        raise TypeError("a stored body file is not decoded")

    async def write(self, writer: AbstractStreamWriter) -> None:
        await send(writer, self.file, self.start, self.end)

    async def write_with_length(
        self, writer: AbstractStreamWriter, content_length: int | None
    ) -> None:
        await self.write(writer)


async def send(writer: AbstractStreamWriter, file: BodyFile, start: int, end: int) -> None:
    """Send the bytes ``start`` to ``end`` of the file on ``writer``, its head already given
    to it. ConnectionResetError when the client left, or when the body failed its checks
    (the connection is then aborted)."""
    if start >= end:
        return
    try:
        fd, stat = file.open()
    except OSError:  # gone since the lookup: the checked read finds it so, and says so
        fd = -1
    if fd >= 0:
        try:
            if stat in file.verified:
                plain = plain_writer(writer) if file.verified.sendfile else None
                if plain is not None:
                    await _sendfile(plain, fd, start, end)
                else:
                    await _read_through(writer, fd, start, end)
                return
        finally:
            os.close(fd)
    await _checked(writer, file, start, end)


async def _sendfile(writer: StreamWriter, fd: int, start: int, end: int) -> None:
    transport = writer.transport
    assert transport is not None
    writer.send_headers()  # aiohttp holds the head until the first write
    loop = asyncio.get_running_loop()
    out = os.dup(transport.get_extra_info("socket").fileno())
    try:
        offset = start
        while offset < end:
            if transport.is_closing():
                raise ConnectionResetError("the client went away")
            if transport.get_write_buffer_size():  # the head, or what an earlier write left
                await _writable(loop, out)
                await asyncio.sleep(0)  # the transport writes its buffer on the same event
                continue
            try:
                sent = os.sendfile(out, fd, offset, min(end - offset, SENDFILE_MAX))
            except BlockingIOError:
                await _writable(loop, out)
                continue
            except OSError as error:
                raise ConnectionResetError(f"sendfile: {error.strerror}") from None
            if sent == 0:  # the file is shorter than its record says: never end cleanly
                transport.abort()
                raise ConnectionResetError("a stored body file is shorter than its record")
            offset += sent
            sent_beside(writer, sent)
    finally:
        os.close(out)


async def _read_through(writer: AbstractStreamWriter, fd: int, start: int, end: int) -> None:
    """The bytes of a verified file read and written as any body, a slice at a time (the
    writer waits for the client between slices), its chunks not checked again."""
    offset = start
    while offset < end:
        data = os.pread(fd, min(end - offset, READ_SLICE), offset)
        if not data:  # shorter than its record: never end cleanly
            _abort(writer)
            raise ConnectionResetError("a stored body file is shorter than its record")
        await writer.write(data)
        offset += len(data)


async def _writable(loop: asyncio.AbstractEventLoop, fd: int) -> None:
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_writer(fd, wake)
    try:
        await ready
    finally:
        loop.remove_writer(fd)


async def _checked(writer: AbstractStreamWriter, file: BodyFile, start: int, end: int) -> None:
    whole = start == 0 and end >= file.length
    stat = None
    if whole:
        try:
            fd, stat = file.open()
            os.close(fd)
        except OSError:
            stat = None
    batches = file.read(start, end)
    try:
        while True:
            try:
                batch = await asyncio.to_thread(next, batches, None)
            except BodyCorrupt as error:
                _abort(writer)
                raise ConnectionResetError(f"stored body not sent: {error}") from None
            if batch is None:
                break
            for piece in batch:
                await writer.write(piece)
    finally:
        with contextlib.suppress(ValueError):  # still running in its thread: cancelled
            batches.close()
    if stat is not None:
        file.checked_whole(stat)


def _abort(writer: Any) -> None:
    """Cut the connection of an HTTP/1.1 answer (an HTTP/2 stream is reset by its
    connection when the exception reaches it: h2/connection.py)."""
    if isinstance(writer, StreamWriter) and writer.transport is not None:
        writer.transport.abort()
