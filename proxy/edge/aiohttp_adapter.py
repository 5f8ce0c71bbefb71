"""The one place where the edge relies on aiohttp below its documented API.

Two things here would break silently if aiohttp changed underneath them, so
tests/edge/test_aiohttp_adapter.py asserts each assumption they make and fails the day one no
longer holds; pyproject.toml pins aiohttp to the minor version those tests run on.

- ``Prewritten``: a ``web.StreamResponse`` whose message is already bytes (a fresh hit),
  and which answers every read a response answers. Two shortcuts keep a hit cheap (decision
  0013 has the numbers): it skips ``StreamResponse.__init__`` and computes the four
  attributes that constructor sets from its bytes, only when something reads them; and it
  writes the bytes to the request's transport, beside the request's writer, then waits on
  that writer's drain. Assumed: the constructor sets exactly those four attributes, every
  other one a response reads has a class-level default, aiohttp's request loop asks a
  response only for ``prepare``, ``write_eof`` and ``keep_alive``, the writer has sent and
  buffered nothing when the response is prepared, and its ``drain`` waits while the
  client's socket is above its high-water mark.
- ``OriginConnector``: a pooled origin connection is reused only if aiohttp's client protocol
  says it need not close (``ResponseHandler.should_close``, a public name on a class aiohttp
  does not document). Assumed: ``connect``'s signature, and that bytes arriving on an idle
  connection make it true.
- ``answer_and_close``: a response sent at once, then the client connection closed through
  the server protocol's ``force_close`` (``request.protocol``: ``RequestHandler``, which
  aiohttp does not document), skipping aiohttp's lingering read of an unread body (up to
  ``lingering_time``, 10 s). Assumed: after ``force_close`` the request loop neither reads
  the body nor logs an error, and the bytes written before it still reach the client.
"""

from __future__ import annotations

from typing import Any

from aiohttp import ClientRequest, ClientTimeout, TCPConnector, web
from aiohttp.abc import AbstractStreamWriter
from aiohttp.connector import Connection
from aiohttp.tracing import Trace
from multidict import CIMultiDict, CIMultiDictProxy

# A body up to this size is copied behind its head and sent in one write; a larger one is
# sent from its own bytes, after the head, not copied.
JOINED_BODY_MAX = 16 * 1024


class Prewritten(web.StreamResponse):
    """A response sent as ``parts``: the status line, then field lines (a part may hold
    several), the blank line, and the body, last. For HTTP/1.1 requests that keep the
    connection open: the parts must frame the body with Content-Length.

    It reads as what it sends, as any response does once sent: ``status``, ``reason``,
    ``headers`` (read-only, parsed from the parts only when read), ``content_length``,
    ``keep_alive``, ``prepared`` and ``body_length`` (bytes sent, head included, as aiohttp
    counts it). Its message cannot change: ``headers`` refuses writes and ``set_status``
    raises. Nothing is computed for a hit that nobody reads.
    """

    _keep_alive = True
    _parsed_headers: CIMultiDictProxy[str] | None = None
    _own_state: dict[str | web.ResponseKey[Any], Any] | None = None

    def __init__(self, parts: tuple[bytes, ...]) -> None:  # no super().__init__(): see module
        self._parts = parts

    # What StreamResponse.__init__ would set, read from the parts instead.

    @property
    def _status(self) -> int:  # type: ignore[override]
        return int(self._parts[0][9:12])  # "HTTP/1.1 200 OK\r\n"

    @property
    def _reason(self) -> str:  # type: ignore[override]
        return self._parts[0][13:-2].decode("utf-8")

    @property
    def _headers(self) -> CIMultiDictProxy[str]:  # type: ignore[override]
        headers = self._parsed_headers
        if headers is None:
            head = b"".join(self._parts[:-1]).decode("utf-8")
            lines = head.split("\r\n")[1:]
            fields = (line.partition(": ") for line in lines if line)
            headers = CIMultiDictProxy(CIMultiDict((name, value) for name, _, value in fields))
            self._parsed_headers = headers
        return headers

    @property
    def headers(self) -> CIMultiDictProxy[str]:  # type: ignore[override]
        return self._headers

    @property
    def _state(self) -> dict[str | web.ResponseKey[Any], Any]:  # type: ignore[override]
        state = self._own_state
        if state is None:
            state = self._own_state = {}
        return state

    @property
    def _eof_sent(self) -> bool:  # type: ignore[override]
        return self._body_length > 0

    async def prepare(self, request: web.BaseRequest) -> AbstractStreamWriter | None:
        if self._body_length:
            return None  # sent already
        # Straight to the transport, not through the request's writer, which costs 6% of a
        # hit (decision 0013); that writer has sent nothing for this request, and is sent
        # nothing after it, so the bytes are the whole message.
        transport = request.transport
        if transport is None or transport.is_closing():
            raise ConnectionResetError("the client has gone")
        parts = self._parts
        body = parts[-1]
        if len(body) > JOINED_BODY_MAX:
            # Handed over as it is (one writev with the head), not copied into a new buffer.
            head = b"".join(parts[:-1])
            transport.writelines((head, body))
            self._body_length = len(head) + len(body)
        else:
            message = b"".join(parts)
            transport.write(message)
            self._body_length = len(message)
        # Flow control as aiohttp's own writer does it: wait while the socket's buffer is
        # above its high-water mark, so a client that does not read cannot grow it.
        await request.writer.drain()
        return None

    async def write_eof(self, data: bytes = b"") -> None:
        return None  # the message ended with its parts


class OriginConnector(TCPConnector):
    """Hands out a pooled connection only if the origin sent nothing on it while it was idle.

    Bytes arriving on an idle keep-alive connection (the late tail of a body longer than its
    Content-Length, or a response nobody asked for) would be read as the answer to the next
    request sent on it, and stored under that request's key: response queue poisoning.
    aiohttp parses them as they arrive into a queued response or an error, and either makes
    the connection ``should_close``; such a connection is closed here, not reused. (A piece
    shorter than a response head is dropped: aiohttp starts a new parser for every request.)
    """

    async def connect(
        self,
        req: ClientRequest,
        traces: list[Trace],
        timeout: ClientTimeout,  # noqa: ASYNC109 (aiohttp's signature)
    ) -> Connection:
        while True:
            connection = await super().connect(req, traces, timeout)
            protocol = connection.protocol
            if protocol is None or not protocol.should_close:
                return connection
            connection.close()


async def answer_and_close(request: web.BaseRequest, response: web.StreamResponse) -> None:
    """Send ``response`` now, then close the connection without reading the rest of the
    request body: for a body that stopped arriving, where lingering would only hold the
    connection open. The transport sends what it was given before it closes."""
    await response.prepare(request)
    await response.write_eof()
    request.protocol.force_close()
