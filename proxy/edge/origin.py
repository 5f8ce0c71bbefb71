"""The origin client: one aiohttp session, and the boundary where its errors become ours.

Every aiohttp or timeout exception raised while talking to an origin, whether at connect,
while waiting for headers or while reading the body, leaves this module as an OriginError:
OriginTimeout (→ 504), OriginUnreachable (→ 502) or OriginProtocolError (→ 502).
aiohttp closes a connection on any framing error, so a broken response never poisons the
next request on a reused connection.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
from yarl import URL

from proxy.config import DomainConfig
from proxy.errors import OriginError, OriginProtocolError, OriginTimeout, OriginUnreachable

CHUNK = 64 * 1024


def new_session() -> aiohttp.ClientSession:
    """The one session the edge uses for every origin.

    No cookie jar (a shared proxy must never mix users' cookies), no transparent
    decompression (bodies are passed and stored as the origin encoded them), no headers of
    aiohttp's own.
    """
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=1024, limit_per_host=256, enable_cleanup_closed=True),
        cookie_jar=aiohttp.DummyCookieJar(),
        auto_decompress=False,
        skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding", "Content-Type"),
        timeout=aiohttp.ClientTimeout(total=None),
        raise_for_status=False,
    )


class OriginResponse:
    """The origin's answer: status, headers, and a body read in chunks."""

    __slots__ = ("_response", "headers", "reason", "status")

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self.status = response.status
        self.reason = response.reason or ""
        self.headers: tuple[tuple[str, str], ...] = tuple(response.headers.items())

    @property
    def content_length(self) -> int | None:
        return self._response.content_length

    async def read_chunk(self) -> bytes:
        """The next piece of the body; b"" at its end. Raises OriginError."""
        try:
            return await self._response.content.readany()
        except Exception as exc:
            raise _translate(exc, self._response.url.host or "origin") from None

    async def read_up_to(self, limit: int) -> tuple[bytes, bool]:
        """Read the body until it ends or passes ``limit``; return it and whether it ended."""
        parts: list[bytes] = []
        size = 0
        while True:
            chunk = await self.read_chunk()
            if not chunk:
                return b"".join(parts), True
            parts.append(chunk)
            size += len(chunk)
            if size > limit:
                return b"".join(parts), False

    def close(self) -> None:
        """Drop the connection: used when the body will not be read to its end."""
        self._response.close()


@asynccontextmanager
async def origin_request(
    session: aiohttp.ClientSession,
    domain: DomainConfig,
    method: str,
    target: str,
    headers: Sequence[tuple[str, str]],
    data: Any = None,
) -> AsyncIterator[OriginResponse]:
    """Send one request to the domain's origin. The target is sent exactly as received."""
    url = URL(domain.origin + target, encoded=True)
    timeout = aiohttp.ClientTimeout(
        total=None, sock_connect=domain.connect_timeout, sock_read=domain.read_timeout
    )
    try:
        async with session.request(
            method,
            url,
            headers=list(headers),
            data=data,
            allow_redirects=False,
            timeout=timeout,
            compress=None,
        ) as response:
            yield OriginResponse(response)
    except Exception as exc:
        if isinstance(exc, OriginError):
            raise
        raise _translate(exc, domain.name) from None


def _translate(exc: BaseException, where: str) -> BaseException:
    """The OriginError for an aiohttp or timeout exception; anything else unchanged."""
    if isinstance(exc, TimeoutError):
        return OriginTimeout(f"{where}: the origin did not answer in time")
    if isinstance(exc, aiohttp.ClientConnectorError):
        return OriginUnreachable(f"{where}: origin unreachable ({exc.strerror})")
    if isinstance(exc, aiohttp.ClientPayloadError | aiohttp.ClientResponseError):
        return OriginProtocolError(f"{where}: broken response from origin ({exc})")
    if isinstance(exc, aiohttp.ClientError):
        return OriginProtocolError(f"{where}: origin request failed ({exc})")
    return exc
