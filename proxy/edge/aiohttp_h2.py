"""Where an HTTP/2 stream's request relies on aiohttp below its documented API (decision
0013; the rest is in aiohttp_adapter.py and aiohttp_server.py). tests/edge/
test_aiohttp_adapter.py asserts each assumption.

- ``h2_request`` and ``BodyFlow`` (HTTP/2, decision 0036): an HTTP/2 stream's request is a
  ``web.BaseRequest`` built from a ``RawRequestMessage`` of version 2.0, the stream's body
  ``StreamReader`` and a writer of aiohttp's public ``AbstractStreamWriter`` kind
  (proxy/edge/h2/stream.py), so the edge's handler serves it as it serves HTTP/1.1. Assumed:
  ``BaseRequest`` reads of its ``protocol`` only ``transport`` (the connection's, for TLS
  and SNI), ``ssl_context``, ``peername`` and ``sockname`` and, for ``post()`` which the
  edge never calls, two parser limits; a
  ``StreamReader`` asks its protocol only ``pause_reading``, ``resume_reading``,
  ``connected`` and ``_reading_paused`` (``BodyFlow`` is aiohttp's ``BaseProtocol`` with
  those turned into the stream's flow-control window), calls ``resume_reading`` after a
  read that leaves it below its low-water mark (a read of n bytes raises that mark to n),
  and holds its unread bytes' count in ``_size`` (``unread``); ``web.Response`` writes a version
  2.0 message through ``write_headers``, ``write`` and ``write_eof`` without a chunk framing
  of its own (``enable_chunking`` is the writer's to ignore). The hand-over of a connection
  to HTTP/2 is aiohttp_server.py's.
  ``answer_and_close`` and ``send_continue`` (100 Continue) do on HTTP/2 what their HTTP/1.1
  bytes do, through the stream (an RST_STREAM, an interim HEADERS).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import lru_cache
from typing import Any, cast

from aiohttp import StreamReader, web
from aiohttp.abc import AbstractStreamWriter
from aiohttp.base_protocol import BaseProtocol
from aiohttp.http import HttpVersion, RawRequestMessage
from aiohttp.streams import EMPTY_PAYLOAD
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

HTTP2 = HttpVersion(2, 0)


def h2_request(
    *,
    method: str,
    path: str,
    headers: CIMultiDict[str],
    raw_headers: tuple[tuple[bytes, bytes], ...],
    body: StreamReader | None,
    connection: object,
    writer: AbstractStreamWriter,
    task: asyncio.Task[None],
) -> web.BaseRequest:
    """The request an HTTP/2 stream carries, as the edge's handler reads any request: version
    2.0, never ``should_close`` (the stream ends, not the connection), ``body`` None for a
    stream that ended with its headers. ``path`` is an origin-form target (``:path``), or
    ``*`` for OPTIONS, checked by the caller; ``connection`` has the ``transport``,
    ``ssl_context``, ``peername`` and ``sockname`` the request reads (a stream's own:
    h2/stream.py's ``StreamProtocol``)."""
    message = RawRequestMessage(
        method,
        path,
        HTTP2,
        CIMultiDictProxy(headers),
        raw_headers,
        False,
        None,
        False,
        False,
        _url(path),
    )
    payload = EMPTY_PAYLOAD if body is None else body
    loop = task.get_loop()
    return web.BaseRequest(message, payload, cast(Any, connection), writer, task, loop)


@lru_cache(maxsize=1024)
def _url(path: str) -> URL:
    """The URL of a target (URLs are immutable: one per distinct target is shared)."""
    if path.startswith("/"):
        part, _, fragment = path.partition("#")
        part, _, query = part.partition("?")
        return URL.build(path=part, query_string=query, fragment=fragment, encoded=True)
    return URL(path, encoded=True)


class BodyFlow(BaseProtocol):
    """What an HTTP/2 request body's ``StreamReader`` pauses and resumes: the stream's
    window. ``resumed`` is called when the handler may have read some of what the reader
    holds (the connection then reopens the windows by what was read, ``unread``: never by
    what merely arrived, issue 32); ``pause_reading`` only notes that bytes are held (the
    stream's window, not the socket, stops the client)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, resumed: Callable[[], None]) -> None:
        super().__init__(loop)
        self._resumed = resumed
        self.open = True

    @property
    def connected(self) -> bool:
        return self.open

    def pause_reading(self) -> None:
        self._reading_paused = True

    def resume_reading(self, resume_parser: bool = True) -> None:
        self._reading_paused = False
        self._resumed()


def body_reader(flow: BodyFlow) -> StreamReader:
    """A request body's reader, whose low-water mark is one byte at first: ``flow`` hears
    of a read that empties it, at least (``BodyFlow.resume_reading``)."""
    return StreamReader(flow, 1, loop=flow._loop)


def unread(reader: StreamReader) -> int:
    """The bytes fed to ``reader`` and not yet read from it."""
    return reader._size
