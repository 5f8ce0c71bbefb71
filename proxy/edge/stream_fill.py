"""A large object's fill: its body goes from the origin to the first client and to the shared
tier's body file at once, a piece at a time, and is never whole in memory (decision 0039).

``tee`` reads the origin's body after the ``prefix`` already read (the fill reads a body
whole up to ``Filler.whole_max``; past that it streams). Each piece is appended to the
tier's fill (in the tier's writer thread) while it is written to the client, and the next
piece is read once both are done: the pace is the slowest of the origin, the client and
the disk, and what is held is a piece or two plus the transport's buffer.

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
) -> Teed:
    """Stream the body to the client (``headers``: its answer's fields; None: no client) and
    into ``fill``; commit the fill once the body ended, unless the store is ``fenced``."""
    client: web.StreamResponse | None = None
    if headers is not None:
        client = web.StreamResponse(status=origin.status, reason=origin.reason, headers=headers)
        if origin.content_length is not None:
            client.content_length = origin.content_length
        await client.prepare(request)
    sink = _Sink(fill, limit, give_up)
    writing = client is not None
    try:
        chunk = prefix
        while chunk:
            appended = sink.append(chunk)
            if writing and client is not None:
                try:
                    await client.write(chunk)
                except ConnectionError:  # the client left: the fill goes on without it
                    writing = False
            if appended is not None and not await appended:
                sink.drop()
            if sink.fill is None and not writing:
                origin.close()  # no one left to read it for
                return Teed(client, None)
            progress()
            chunk = await origin.read_chunk()
    except OriginError as exc:
        respond.log.warning("%s (while streaming a large object; fill dropped)", exc)
        origin.close()
        sink.drop()
        if client is not None and request.transport is not None:
            request.transport.abort()
        return Teed(client, None)
    except BaseException:
        sink.drop()
        raise
    if writing and client is not None:
        with contextlib.suppress(ConnectionError):
            await client.write_eof()
    if fenced():  # a fleet member past its lease stores nothing (decision 0014)
        sink.drop()
    committing = sink.fill
    stored = None if committing is None else await committing.commit()
    return Teed(client, stored)
