"""Request bodies on the forwarded path: read before the origin is asked, or streamed to it.

A request body holds an origin connection for as long as it takes to arrive, so a client that
sends part of a body and stops would hold one forever, and a few hundred of them held every
connection of the domain (issue 13). Decision 0015:

- a body is read, up to edge.request_buffer_bytes, before the origin is asked (nginx's
  proxy_request_buffering): one that never arrives never takes a connection;
- every read waits at most edge.body_timeout for the next piece (nginx's client_body_timeout):
  a body that stops arriving is answered 408 and its connection closed;
- a longer body is streamed, and streamed uploads share at most a quarter of the domain's
  origin connections (``UploadShares``), a client at most a quarter of that share, so stalled
  or slow uploads can never take the connections that misses need.

The bytes are passed on as the client sent them: the edge's server does not decode a
Content-Encoding (``auto_decompress=False`` in service.py), so the origin gets the client's
bytes under the client's label. Errors reading the body leave here as RequestBodyError.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager

import aiohttp
from aiohttp.streams import StreamReader

from proxy.errors import OriginBusy, RequestBodyError, RequestBodyIncomplete, RequestBodyTimeout


class UploadsBusy(OriginBusy):
    public = "too many uploads to this site are in progress; retry later"


async def read_piece(content: StreamReader, seconds: float) -> bytes:
    """The next piece of the body (b"" at its end), waiting at most ``seconds`` for it."""
    try:
        async with asyncio.timeout(seconds):
            return await content.readany()
    except TimeoutError:
        raise RequestBodyTimeout(f"no request body for {seconds:g} s") from None
    except (ConnectionError, aiohttp.ClientError) as exc:
        raise RequestBodyIncomplete(f"the request body ended early ({exc})") from None


async def buffer(content: StreamReader, *, limit: int, seconds: float) -> tuple[bytes, bool]:
    """Read the body until it ends or passes ``limit``: what was read, and whether it ended."""
    parts: list[bytes] = []
    size = 0
    while size <= limit:
        piece = await read_piece(content, seconds)
        if not piece:
            return b"".join(parts), True
        parts.append(piece)
        size += len(piece)
    return b"".join(parts), False


class Streamed:
    """The rest of a body too long to buffer, as the origin client reads it: the part already
    read, then each piece as it arrives. A failure is kept in ``failed``: the origin client
    reports it as its own connection error, and the handler answers with this one instead."""

    __slots__ = ("_content", "_prefix", "_timeout", "failed")

    def __init__(self, prefix: bytes, content: StreamReader, timeout: float) -> None:
        self._prefix = prefix
        self._content = content
        self._timeout = timeout
        self.failed: RequestBodyError | None = None

    async def pieces(self) -> AsyncIterator[bytes]:
        yield self._prefix
        while True:
            try:
                piece = await read_piece(self._content, self._timeout)
            except RequestBodyError as exc:
                self.failed = exc
                raise
            if not piece:
                return
            yield piece


class UploadShares:
    """How many streamed uploads each domain, and each client address of a domain, has at
    the origin now, against their shares of the domain's origin connections."""

    __slots__ = ("_by_client", "_by_domain", "_client_share", "_domain_share")

    def __init__(self, origin_connections: dict[str, int]) -> None:
        self._domain_share = {name: max(1, n // 4) for name, n in origin_connections.items()}
        self._client_share = {name: max(1, n // 16) for name, n in origin_connections.items()}
        self._by_domain: dict[str, int] = {}
        self._by_client: dict[tuple[str, str], int] = {}

    def reconfigure(self, origin_connections: dict[str, int]) -> None:
        """New shares for a reloaded config; uploads in progress keep counting. Removed
        domains keep their shares: an upload routed before the reload may still take one."""
        self._domain_share = {
            **self._domain_share,
            **{name: max(1, n // 4) for name, n in origin_connections.items()},
        }
        self._client_share = {
            **self._client_share,
            **{name: max(1, n // 16) for name, n in origin_connections.items()},
        }

    @contextmanager
    def taken(self, domain: str, client: str) -> Iterator[None]:
        """Hold a share for one upload; UploadsBusy when the domain's or client's is used up."""
        key = (domain, client)
        in_domain = self._by_domain.get(domain, 0)
        of_client = self._by_client.get(key, 0)
        if in_domain >= self._domain_share[domain] or of_client >= self._client_share[domain]:
            raise UploadsBusy(f"{domain}: no share left for a streamed upload from {client}")
        self._by_domain[domain] = in_domain + 1
        self._by_client[key] = of_client + 1
        try:
            yield
        finally:
            self._release(domain, key)

    def _release(self, domain: str, key: tuple[str, str]) -> None:
        self._by_domain[domain] -= 1
        if self._by_client[key] == 1:
            del self._by_client[key]  # forgotten, so the table holds only uploads in progress
        else:
            self._by_client[key] -= 1
