"""Request smuggling between client and proxy, over raw sockets.

Every request below is framed ambiguously: two parsers could disagree on where its body
ends, so the bytes after it could be read as a second request ("GET /smuggled") by one and
as body by the other. The edge must answer 400 and close the connection, and the origin must
see nothing of it. The edge reads requests with aiohttp's llhttp parser in its strict mode;
these tests pin that down so a lenient parser (or a future lenient flag) fails them.
"""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import http_parser, web

from tests.conftest import EdgeFactory, EdgeUnderTest
from tests.polling import until
from tests.security.conftest import RawOriginFactory, Site
from tests.security.support import CACHEABLE, exchange, ok

HOST = b"Host: example.com\r\n"
SMUGGLED = b"GET /smuggled HTTP/1.1\r\nHost: example.com\r\n\r\n"


def post(headers: bytes, body: bytes = b"") -> bytes:
    return b"POST /a HTTP/1.1\r\n" + HOST + headers + b"\r\n" + body


ATTACKS = {
    # CL.TE and TE.CL: both framings at once, in either order.
    "cl-te": post(b"Content-Length: 6\r\nTransfer-Encoding: chunked\r\n", b"0\r\n\r\n" + SMUGGLED),
    "te-cl": post(b"Transfer-Encoding: chunked\r\nContent-Length: 4\r\n", b"5c\r\n" + SMUGGLED),
    "cl-te-lowercase": post(b"content-length: 6\r\ntransfer-encoding: chunked\r\n", b"0\r\n\r\n"),
    # TE.TE: a Transfer-Encoding one parser reads as chunked and another ignores.
    "te-xchunked": post(b"Transfer-Encoding: xchunked\r\n", b"0\r\n\r\n" + SMUGGLED),
    "te-space-before-colon": post(b"Transfer-Encoding : chunked\r\n", b"0\r\n\r\n" + SMUGGLED),
    "te-twice": post(
        b"Transfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n", b"0\r\n\r\n" + SMUGGLED
    ),
    "te-chunked-not-last": post(b"Transfer-Encoding: chunked, identity\r\n", b"0\r\n\r\n"),
    "te-vertical-tab": post(b"Transfer-Encoding:\x0bchunked\r\n", b"0\r\n\r\n" + SMUGGLED),
    "te-form-feed": post(b"Transfer-Encoding:\x0cchunked\r\n", b"0\r\n\r\n" + SMUGGLED),
    "te-leading-space": post(b" Transfer-Encoding: chunked\r\n", b"0\r\n\r\n" + SMUGGLED),
    "te-obs-fold": post(b"X-Pad: 1\r\n\tTransfer-Encoding: chunked\r\n", b"0\r\n\r\n" + SMUGGLED),
    "te-with-cl-zero": post(b"Content-Length: 0\r\nTransfer-Encoding: chunked\r\n", b"0\r\n\r\n"),
    "te-http-1.0": b"POST /a HTTP/1.0\r\n"
    + HOST
    + b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
    + SMUGGLED,
    # Content-Length that two parsers could read differently.
    "cl-twice-different": post(b"Content-Length: 5\r\nContent-Length: 40\r\n", b"hello" + SMUGGLED),
    "cl-twice-same": post(b"Content-Length: 5\r\nContent-Length: 5\r\n", b"hello" + SMUGGLED),
    "cl-list": post(b"Content-Length: 5, 5\r\n", b"hello" + SMUGGLED),
    "cl-plus": post(b"Content-Length: +5\r\n", b"hello" + SMUGGLED),
    "cl-minus": post(b"Content-Length: -5\r\n", b"hello" + SMUGGLED),
    "cl-hex": post(b"Content-Length: 0x5\r\n", b"hello" + SMUGGLED),
    "cl-inner-space": post(b"Content-Length: 5 0\r\n", b"hello" + SMUGGLED),
    "cl-empty": post(b"Content-Length: \r\n", b"hello" + SMUGGLED),
    "cl-overflow": post(b"Content-Length: 99999999999999999999999\r\n", b"hello"),
    "cl-obs-fold": post(b"Content-Length: 5\r\n 0\r\n", b"hello" + SMUGGLED),
    # Line endings and folding.
    "obs-fold": b"GET /a HTTP/1.1\r\n" + HOST + b"X-Pad: a\r\n b\r\n\r\n",
    "bare-lf-request-line": b"GET /a HTTP/1.1\n" + HOST + b"\r\n",
    "bare-lf-header": b"GET /a HTTP/1.1\r\nHost: example.com\n\r\n",
    "bare-lf-everywhere": b"GET /a HTTP/1.1\nHost: example.com\n\n" + SMUGGLED,
    "bare-cr-in-value": b"GET /a HTTP/1.1\r\n" + HOST + b"X-Pad: a\rb\r\n\r\n",
    "nul-in-value": b"GET /a HTTP/1.1\r\n" + HOST + b"X-Pad: a\x00b\r\n\r\n",
    # Chunk-size tricks.
    "chunk-size-hex-prefix": post(b"Transfer-Encoding: chunked\r\n", b"0x5\r\nhello\r\n0\r\n\r\n"),
    "chunk-size-space": post(b"Transfer-Encoding: chunked\r\n", b"5 \r\nhello\r\n0\r\n\r\n"),
    "chunk-size-plus": post(b"Transfer-Encoding: chunked\r\n", b"+5\r\nhello\r\n0\r\n\r\n"),
    "chunk-size-minus": post(b"Transfer-Encoding: chunked\r\n", b"-5\r\nhello\r\n0\r\n\r\n"),
    "chunk-size-overflow": post(
        b"Transfer-Encoding: chunked\r\n", b"10000000000000005\r\nhello\r\n0\r\n\r\n" + SMUGGLED
    ),
    "chunk-size-bare-lf": post(b"Transfer-Encoding: chunked\r\n", b"5\nhello\r\n0\r\n\r\n"),
    "chunk-ext-bare-lf": post(b"Transfer-Encoding: chunked\r\n", b"5;x\nhello\r\n0\r\n\r\n"),
    "chunk-data-too-long": post(
        b"Transfer-Encoding: chunked\r\n", b"3\r\nhello\r\n0\r\n\r\n" + SMUGGLED
    ),
    "chunk-last-bare-lf": post(b"Transfer-Encoding: chunked\r\n", b"0\n\n" + SMUGGLED),
    "chunk-trailer-junk": post(b"Transfer-Encoding: chunked\r\n", b"0\r\nnot a field\r\n\r\n"),
}


def test_requests_are_parsed_by_llhttp() -> None:
    """aiohttp falls back to a pure-Python parser without its C extension (or with
    AIOHTTP_NO_EXTENSIONS set), and that parser accepts a bare LF after a header line and
    chunk sizes that overflow (the attacks below show it). The edge must run on llhttp."""
    assert http_parser.HttpRequestParser is not http_parser.HttpRequestParserPy


@pytest.mark.parametrize("attack", list(ATTACKS.values()), ids=list(ATTACKS))
async def test_ambiguous_framing_is_refused_and_closes_the_connection(
    edge: EdgeUnderTest, origin: Site, attack: bytes
) -> None:
    origin.reply("/smuggled", b"smuggled", headers={"Cache-Control": CACHEABLE})
    answer = await exchange(edge.url, attack)
    assert answer.statuses == [400]
    assert answer.closed
    assert origin.seen == []
    # The next, clean client is served normally and nothing was smuggled into the cache.
    response, _ = await edge.get("/smuggled")
    assert "fwd=uri-miss" in response.headers["Cache-Status"]
    assert [seen.target for seen in origin.seen] == ["/smuggled"]


@pytest.mark.parametrize("attack", ["cl-te", "te-cl", "te-xchunked", "cl-twice-different"])
async def test_an_attack_pipelined_behind_a_valid_request_is_refused(
    edge: EdgeUnderTest, origin: Site, attack: str
) -> None:
    origin.reply("/ok", b"fine", headers={"Cache-Control": "no-store"})
    valid = b"GET /ok HTTP/1.1\r\n" + HOST + b"\r\n"
    answer = await exchange(edge.url, valid + ATTACKS[attack])
    assert answer.statuses[-1] == 400
    assert set(answer.statuses[:-1]) <= {200}
    assert answer.closed
    assert {seen.target for seen in origin.seen} <= {"/ok"}


async def test_a_body_that_turns_bad_midway_never_reaches_the_origin_complete(
    make_edge: EdgeFactory, raw_origin: RawOriginFactory
) -> None:
    """Once a streamed body is on its way, the origin has its head and first chunk. When the
    client's chunked framing breaks after that, the origin must never get the terminating
    chunk (which would make a truncated body look complete), and the connection to it is
    dropped, never reused."""
    server = await raw_origin(lambda request: ok(b"answered"))
    edge = await make_edge(
        # A body past 1 byte streams (decision 0015): the origin has its start.
        edge={"listen": "127.0.0.1:0", "request_buffer_bytes": 1},
        domains=[{"name": "example.com", "origin": server.url}],
    )

    async def then_break(writer: asyncio.StreamWriter) -> None:
        await until(lambda: bool(server.received) and b"hello" in server.received[0])
        writer.write(b"zz\r\n")  # not a chunk size
        await writer.drain()
        writer.close()  # the client goes away; nothing else may reach the origin

    head = post(b"Transfer-Encoding: chunked\r\n", b"5\r\nhello\r\n")
    await exchange(edge.url, head, then=then_break)
    await until(lambda: 0 in server.closed)
    [request] = server.requests
    assert not request.complete
    assert b"0\r\n\r\n" not in server.received[0]
    assert b"zz" not in server.received[0]


async def test_a_buffered_body_that_turns_bad_never_reaches_the_origin(
    make_edge: EdgeFactory, raw_origin: RawOriginFactory
) -> None:
    """A body within edge.request_buffer_bytes is read whole before the origin is asked
    (decision 0015): when its framing breaks, the origin is never asked at all."""
    server = await raw_origin(lambda request: ok(b"answered"))
    edge = await make_edge(domains=[{"name": "example.com", "origin": server.url}])
    head = post(b"Transfer-Encoding: chunked\r\n", b"5\r\nhello\r\nzz\r\n")
    answer = await exchange(edge.url, head)
    assert answer.closed
    assert all(status >= 400 for status in answer.statuses)
    assert server.requests == []
    assert server.received == []


@pytest.mark.slow
async def test_request_body_is_forwarded_exactly_as_framed(
    edge: EdgeUnderTest, origin: Site
) -> None:
    """Control: a well-framed request with a pipelined second request is two requests, each
    with its own body, as the edge itself framed them."""

    async def echo(request: web.Request) -> web.StreamResponse:
        return web.Response(body=await request.read(), headers={"Cache-Control": "no-store"})

    origin.default = echo
    first = post(b"Content-Length: 5\r\n", b"hello")
    second = b"GET /b HTTP/1.1\r\n" + HOST + b"Connection: close\r\n\r\n"
    answer = await exchange(edge.url, first + second)
    assert answer.statuses == [200, 200]
    assert [(seen.method, seen.target, seen.body) for seen in origin.seen] == [
        ("POST", "/a", b"hello"),
        ("GET", "/b", b""),
    ]
    assert all(seen.headers["Via"] == "1.1 cdn-proxy" for seen in origin.seen)
