"""A fast hit (``respond.Hit``) is written as precomputed bytes, but reads as the response it
sends: an access log, a middleware or telemetry reading it see what the full path's
``web.Response`` shows them for the same entry."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import RawTestServer, TestServer

from proxy.core.cache.entry import StoredResponse
from proxy.edge import respond
from tests.conftest import FakeClock, Origin
from tests.edge.conftest import ClockedEdge

ACCESS_FORMAT = '%s %b "%{Cache-Status}o" %{Content-Type}o'

ANSWERS: dict[str, tuple[int, bytes, dict[str, str]]] = {
    "plain": (200, b"x" * 1024, {"Cache-Control": "max-age=600", "Content-Type": "text/css"}),
    "not-found": (404, b"gone", {"Cache-Control": "max-age=600"}),
    "validators": (
        200,
        b"v",
        {
            "Cache-Control": "public, max-age=600",
            "Content-Type": "text/html; charset=utf-8",
            "ETag": '"abc"',
            "Last-Modified": "Mon, 13 Nov 2023 22:13:20 GMT",
            "X-Unicode": "caf\u00e9",
        },
    ),
}


@dataclass
class Read:
    """A response as a middleware saw it when the handler returned it, and the response."""

    status: int
    reason: str
    headers: dict[str, str]
    response: web.StreamResponse


@dataclass
class Served:
    """The edge inside an aiohttp Application with a middleware and an access log."""

    port: int
    clock: FakeClock
    reads: list[Read]
    log: pytest.LogCaptureFixture

    async def get(self, path: str, *extra: str) -> int:
        """GET ``path`` on a new connection; the number of bytes the answer took."""
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        lines = [f"GET {path} HTTP/1.1", "Host: example.com", *extra, "", ""]
        try:
            async with asyncio.timeout(10):  # a bound, not a wait
                writer.write("\r\n".join(lines).encode())
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.partition(b": ")[2])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length: ")
                )
                await reader.readexactly(length)
                return len(head) + length
        finally:
            writer.close()
            await writer.wait_closed()


@pytest.fixture
async def served(
    clocked_edge: ClockedEdge,
    aiohttp_server: Callable[..., Awaitable[TestServer]],
    caplog: pytest.LogCaptureFixture,
) -> Served:
    reads: list[Read] = []

    @web.middleware
    async def reader(request: web.Request, handler: Any) -> web.StreamResponse:
        response: web.StreamResponse = await handler(request)
        reads.append(Read(response.status, response.reason, dict(response.headers), response))
        return response

    app = web.Application(middlewares=[reader])
    app.router.add_route("*", "/{tail:.*}", clocked_edge.edge.handle)
    caplog.set_level(logging.INFO, logger="tests.access")
    server = await aiohttp_server(
        app, access_log=logging.getLogger("tests.access"), access_log_format=ACCESS_FORMAT
    )
    return Served(port=server.port or 0, clock=clocked_edge.clock, reads=reads, log=caplog)


async def stored_then_both_paths(served: Served, origin: Origin, name: str) -> tuple[Read, Read]:
    """The fast hit and the full path's answer for one stored entry, as the middleware read
    them; the access log has a line for each."""
    status, body, headers = ANSWERS[name]
    origin.reply(f"/{name}", body, status=status, headers=headers)
    await served.get(f"/{name}")  # the miss that stores it
    served.clock.advance(7)
    served.log.clear()
    await served.get(f"/{name}")
    # A request Cache-Control keeps a request off the fast path (test_fast_path.py).
    await served.get(f"/{name}", "Cache-Control: max-age=3600")
    fast, full = served.reads[-2:]
    assert type(fast.response) is respond.Hit
    assert type(full.response) is web.Response
    return fast, full


def sent(response: web.StreamResponse) -> dict[str, object]:
    """What anything reading a response after it was sent may ask it."""
    return {
        "status": response.status,
        "reason": response.reason,
        "headers": sorted(response.headers.items()),
        "content_length": response.content_length,
        "content_type": response.content_type,
        "charset": response.charset,
        "etag": response.etag,
        "last_modified": response.last_modified,
        "keep_alive": response.keep_alive,
        "prepared": response.prepared,
        "chunked": response.chunked,
        "compression": response.compression,
        "body_length": response.body_length,
        "task": response.task,
        "state": list(response.items()),
    }


@pytest.mark.parametrize("name", sorted(ANSWERS))
async def test_a_sent_hit_reads_as_the_full_path_s_response(
    served: Served, origin: Origin, name: str
) -> None:
    fast, full = await stored_then_both_paths(served, origin, name)
    assert sent(fast.response) == sent(full.response)
    assert fast.response.headers["Age"] == "7"
    assert fast.response.status == ANSWERS[name][0]


@pytest.mark.parametrize("name", sorted(ANSWERS))
async def test_a_middleware_reads_a_hit_s_status_and_fields(
    served: Served, origin: Origin, name: str
) -> None:
    """When the handler returns, the full path's response does not hold yet the fields aiohttp
    adds as it sends (Server, Content-Length); a hit holds everything it will send. Every
    field the middleware reads on the full path it reads on the hit, with the same value."""
    fast, full = await stored_then_both_paths(served, origin, name)
    assert (fast.status, fast.reason) == (full.status, full.reason)
    assert fast.headers.items() >= full.headers.items()
    assert fast.headers == dict(fast.response.headers)  # and nothing changed as it was sent


@pytest.mark.parametrize("name", sorted(ANSWERS))
async def test_the_access_log_logs_a_hit_as_it_logs_the_full_path(
    served: Served, origin: Origin, name: str
) -> None:
    status, _, headers = ANSWERS[name]
    origin.reply(f"/{name}", ANSWERS[name][1], status=status, headers=headers)
    await served.get(f"/{name}")
    served.log.clear()
    fast_bytes = await served.get(f"/{name}")
    full_bytes = await served.get(f"/{name}", "Cache-Control: max-age=3600")
    content_type = headers.get("Content-Type", "application/octet-stream")
    assert [type(read.response) for read in served.reads[-2:]] == [respond.Hit, web.Response]
    assert fast_bytes == full_bytes
    assert [record.getMessage() for record in served.log.records] == [
        f'{status} {fast_bytes} "cdn-proxy; hit" {content_type}',
        f'{status} {full_bytes} "cdn-proxy; hit" {content_type}',
    ]


# -- the hit object on its own ------------------------------------------------------------------

DATE = "Mon, 13 Nov 2023 22:13:20 GMT"


def hit(body: bytes = b"body") -> web.StreamResponse:
    entry = StoredResponse(
        status=203,
        reason="Mine",
        headers=(("Date", DATE), ("Content-Type", "text/plain")),
        body=body,
        birth=0.0,
        freshness_lifetime=60.0,
    )
    lines = respond.hit_lines(entry, via="edge", status="edge; hit")
    assert lines is not None
    return respond.Hit((*lines, b"Age: 3\r\n\r\n", body))


def test_before_it_is_sent_a_hit_reads_as_what_it_will_send() -> None:
    response = hit()
    assert (response.status, response.reason) == (203, "Mine")
    assert list(response.headers.items())[:2] == [("Date", DATE), ("Content-Type", "text/plain")]
    assert response.headers["via"] == "1.1 edge"
    assert response.headers["Age"] == "3"
    assert response.content_length == 4
    assert response.content_type == "text/plain"
    assert response.keep_alive is True
    assert response.prepared is False
    assert response.body_length == 0


def test_a_hit_s_message_cannot_be_changed() -> None:
    """Its bytes are fixed: a change that would not be sent is refused, not accepted."""
    response = hit()
    with pytest.raises(TypeError):
        response.headers["X-Added"] = "1"
    with pytest.raises(AttributeError):
        response.set_status(500)
    with pytest.raises(TypeError):
        response.content_type = "text/html"
    assert response.status == 203
    assert "X-Added" not in response.headers


STARTED = web.ResponseKey("started", float)


@pytest.mark.slow
def test_a_hit_keeps_what_handlers_store_on_it() -> None:
    response = hit()
    response[STARTED] = 1.5
    assert response[STARTED] == 1.5
    assert list(response.items()) == [(STARTED, 1.5)]
    assert len(hit()) == 0


async def test_a_hit_prepared_by_a_middleware_is_sent_once(
    aiohttp_raw_server: Callable[..., Awaitable[RawTestServer]],
) -> None:
    """A middleware may prepare a response itself (to time it, to stream after it); aiohttp
    then prepares it again, which must send nothing more."""

    async def handler(request: web.BaseRequest) -> web.StreamResponse:
        response = hit()
        await response.prepare(request)
        assert response.prepared
        return response

    server = await aiohttp_raw_server(handler, access_log=None)
    message = b"".join(hit()._parts)  # type: ignore[attr-defined]
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port or 0)
    try:
        async with asyncio.timeout(10):  # a bound, not a wait
            get = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"
            writer.write(get + get)
            assert await reader.readexactly(2 * len(message)) == message * 2
            writer.write_eof()
            assert await reader.read() == b""
    finally:
        writer.close()
        await writer.wait_closed()
