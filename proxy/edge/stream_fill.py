"""A large object's fill: its body goes from the origin to the first client and to the shared
tier's body file at once, a piece at a time, and is never whole in memory (decision 0039).

``tee`` reads the origin's body after the ``prefix`` already read (the fill reads a body
whole up to ``Filler.whole_max``; past that it streams). Each piece is appended to the
tier's fill (in the tier's writer thread) while the next is read from the origin and then
it is written to the client: the pace is the slowest of the origin, the client and the
disk, and what is held is two pieces plus the transport's buffer. The last piece is held
back until the fill is committed and the flight landed: a client that has the whole body
finds the object stored (or a collapsed request's answer decided) on its next request.

- The client leaving does not stop the fill: the body is still read to its end and stored
  (requests collapsed on this fill wait for it).
- The fill being dropped (past ``limit``, a disk fault) does not stop the client's answer:
  ``give_up`` releases the collapsed requests at once (each then asks the origin itself).
- An origin that fails half way aborts both: the fill leaves nothing, and the client's
  connection is aborted, never ended as if the body were whole.

Requests collapsed on the fill follow it while its body makes progress (``progress``, each
piece) and are given the stored entry once it is committed: they send it from the file.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web
from multidict import CIMultiDict

from proxy.edge import respond
from proxy.edge.origin import OriginResponse
from proxy.errors import OriginError
from proxy.store.shared.large import FileBacked
from proxy.store.tiered import StreamedFill


@dataclass(frozen=True, slots=True)
class Teed:
    client: web.StreamResponse | None  # the answer streamed, None when there was no client
    stored: FileBacked | None  # the committed entry, None when the fill was dropped


class _Sink:
    """The tier's side of the tee: appends until the fill is dropped or past its limit."""

    def __init__(self, fill: StreamedFill, limit: int, give_up: Callable[[], None]) -> None:
        self.fill: StreamedFill | None = fill
        self._limit = limit
        self._size = 0
        self._give_up = give_up

    def append(self, chunk: bytes) -> asyncio.Future[bool] | None:
        fill = self.fill
        if fill is None:
            return None
        self._size += len(chunk)
        if self._size > self._limit:  # a body without a Content-Length, past max_object_bytes
            self.drop()
            return None
        return asyncio.ensure_future(fill.append(chunk))

    def drop(self) -> None:
        fill, self.fill = self.fill, None
        if fill is not None:
            self._give_up()
            fill.abort()


async def tee(
    request: web.BaseRequest,
    origin: OriginResponse,
    prefix: bytes,
    fill: StreamedFill,
    *,
    headers: CIMultiDict[str] | None,
    limit: int,
    progress: Callable[[], None],
    give_up: Callable[[], None],
    fenced: Callable[[], bool],
    landed: Callable[[FileBacked | None], None],
) -> Teed:
    """Stream the body to the client (``headers``: its answer's fields; None: no client) and
    into ``fill``. Once the body has ended, the fill is committed (unless the store is
    ``fenced``) and ``landed`` told, before the client is sent the last piece: a client
    that has the whole body finds the object stored, wherever it asks next."""
    client = _Client(request, origin, headers)
    await client.start()
    sink = _Sink(fill, limit, give_up)
    try:
        chunk = prefix or await origin.read_chunk()
        while chunk:
            appended = sink.append(chunk)
            following = await origin.read_chunk()  # read ahead: is this piece the last?
            if not following:
                if appended is not None and not await appended:
                    sink.drop()
                break
            await client.write(chunk)
            if appended is not None and not await appended:
                sink.drop()
            if sink.fill is None and not client.writing:
                origin.close()  # no one left to read it for
                return Teed(client.response, None)
            progress()
            chunk = following
    except OriginError as exc:
        respond.log.warning("%s (while streaming a large object; fill dropped)", exc)
        origin.close()
        sink.drop()
        client.abort()
        return Teed(client.response, None)
    except BaseException:
        sink.drop()
        raise
    if fenced():  # a fleet member past its lease stores nothing (decision 0014)
        sink.drop()
    committing = sink.fill
    stored = None if committing is None else await committing.commit()
    landed(stored)
    await client.write(chunk)
    await client.end()
    return Teed(client.response, stored)


class _Client:
    """The client's side of the tee: written to until it leaves."""

    def __init__(
        self,
        request: web.BaseRequest,
        origin: OriginResponse,
        headers: CIMultiDict[str] | None,
    ) -> None:
        self._request = request
        self.response: web.StreamResponse | None = None
        if headers is not None:
            self.response = web.StreamResponse(
                status=origin.status, reason=origin.reason, headers=headers
            )
            if origin.content_length is not None:
                self.response.content_length = origin.content_length
        self.writing = self.response is not None

    async def start(self) -> None:
        if self.response is not None:
            await self.response.prepare(self._request)

    async def write(self, chunk: bytes) -> None:
        if self.writing and chunk and self.response is not None:
            try:
                await self.response.write(chunk)
            except ConnectionError:  # the client left: the fill goes on without it
                self.writing = False

    async def end(self) -> None:
        if self.writing and self.response is not None:
            with contextlib.suppress(ConnectionError):
                await self.response.write_eof()

    def abort(self) -> None:
        """The body cannot be whole: cut the connection rather than end it cleanly."""
        if self.response is not None and self._request.transport is not None:
            self._request.transport.abort()
