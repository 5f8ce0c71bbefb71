"""Request and response smuggling between proxy and origin, seen from a raw origin server
that records every byte and which connection it came on.

- What the proxy sends: never Content-Length and Transfer-Encoding together, never a body
  longer than the one declared, never bytes of one client request inside another's.
- What the proxy reads: a response whose framing is broken, or bytes the origin sends that
  no request asked for, never become the answer to a later request. The connection they
  came on is dropped, not reused (response queue poisoning).
"""

from __future__ import annotations

import pytest

from proxy.core.http.headers import field_name
from tests.conftest import EdgeFactory, EdgeUnderTest
from tests.polling import until
from tests.security.conftest import RawOriginFactory
from tests.security.support import OriginRequest, RawOrigin, exchange, ok

POISON = b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\nCache-Control: max-age=60\r\n\r\nPOISON"


def by_target(request: OriginRequest) -> bytes:
    return ok(b"answer for " + request.target.encode())


async def edge_for(make_edge: EdgeFactory, server: RawOrigin) -> EdgeUnderTest:
    return await make_edge(domains=[{"name": "example.com", "origin": server.url}])


def framing_fields(request: OriginRequest) -> tuple[list[str], list[str]]:
    lengths, codings = [], []
    for line in request.head.split(b"\r\n")[1:]:
        name, _, value = line.decode("latin-1").partition(":")
        if field_name(name.strip()) == "content-length":
            lengths.append(value.strip())
        if field_name(name.strip()) == "transfer-encoding":
            codings.append(value.strip())
    return lengths, codings


HOST = b"Host: example.com\r\n"

CLIENT_REQUESTS = {
    "content-length": (
        b"POST /a HTTP/1.1\r\n" + HOST + b"Content-Length: 5\r\n\r\nhello",
        b"hello",
    ),
    "chunked": (
        b"POST /a HTTP/1.1\r\n"
        + HOST
        + b"Transfer-Encoding: chunked\r\n\r\n2\r\nhe\r\n3\r\nllo\r\n0\r\n\r\n",
        b"hello",
    ),
    "chunked-with-trailer": (
        b"POST /a HTTP/1.1\r\n"
        + HOST
        + b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX-Trailer: 1\r\n\r\n",
        b"hello",
    ),
    "underscore-te-beside-cl": (
        b"POST /a HTTP/1.1\r\n"
        + HOST
        + b"Transfer_Encoding: chunked\r\nContent-Length: 5\r\n\r\nhello",
        b"hello",
    ),
    "te-named-in-connection": (
        b"POST /a HTTP/1.1\r\n"
        + HOST
        + b"Connection: Content-Length\r\nContent-Length: 5\r\n\r\nhello",
        b"hello",
    ),
    "get-with-zero-length": (b"GET /a HTTP/1.1\r\n" + HOST + b"Content-Length: 0\r\n\r\n", b""),
    "put-empty-chunked": (
        b"PUT /a HTTP/1.1\r\n" + HOST + b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        b"",
    ),
}


@pytest.mark.parametrize("kind", list(CLIENT_REQUESTS))
async def test_origin_requests_have_exactly_one_framing(
    make_edge: EdgeFactory, raw_origin: RawOriginFactory, kind: str
) -> None:
    server = await raw_origin(by_target)
    edge = await edge_for(make_edge, server)
    request, body = CLIENT_REQUESTS[kind]
    answer = await exchange(edge.url, request, keep_open=True)
    assert answer.statuses == [200]
    [forwarded] = server.requests
    lengths, codings = framing_fields(forwarded)
    assert not (lengths and codings), forwarded.head
    assert len(lengths) <= 1 and len(codings) <= 1, forwarded.head
    assert codings in ([], ["chunked"])
    if lengths:
        assert int(lengths[0]) == len(forwarded.body)
    assert forwarded.complete
    assert forwarded.body == body


async def test_bytes_after_a_declared_body_are_never_forwarded_inside_it(
    make_edge: EdgeFactory, raw_origin: RawOriginFactory
) -> None:
    """The client declares 5 bytes and sends a second request right behind them. The origin
    gets a 5-byte body and, if anything, a second request framed by the proxy itself."""
    server = await raw_origin(by_target)
    edge = await edge_for(make_edge, server)
    smuggled = b"GET /smuggled HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n"
    request = b"POST /a HTTP/1.1\r\n" + HOST + b"Content-Length: 5\r\n\r\nhello" + smuggled
    answer = await exchange(edge.url, request)
    assert answer.statuses == [200, 200]
    assert [(r.target, r.body) for r in server.requests] == [("/a", b"hello"), ("/smuggled", b"")]
    for forwarded in server.requests:
        assert b"\r\nVia: 1.1 cdn-proxy" in forwarded.head  # framed by the proxy
    everything = b"".join(server.received)
    assert everything.count(b"/smuggled HTTP/1.1") == 1


BROKEN_RESPONSES = {
    "bad-chunk": (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nCache-Control: max-age=60\r\n\r\n"
        b"5\r\nhelloXX\r\n0\r\n\r\n" + POISON
    ),
    "cl-and-te": (
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
        + POISON
    ),
    "two-lengths": b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 11\r\n\r\nhello"
    + POISON,
    "longer-than-declared": ok(b"hello") + POISON,
    "junk-after-body": ok(b"hello") + b"JUNK\r\n\r\n",
}


@pytest.mark.parametrize("kind", list(BROKEN_RESPONSES))
async def test_no_origin_connection_is_reused_after_a_framing_error(
    make_edge: EdgeFactory, raw_origin: RawOriginFactory, kind: str
) -> None:
    def respond(request: OriginRequest) -> bytes:
        return BROKEN_RESPONSES[kind] if request.target == "/broken" else by_target(request)

    server = await raw_origin(respond)
    edge = await edge_for(make_edge, server)
    response, body = await edge.get("/broken")
    assert response.status in (200, 502)
    assert b"POISON" not in body
    if response.status == 200:
        assert body == b"hello"  # exactly the declared body, nothing after it

    response, body = await edge.get("/victim")
    assert body == b"answer for /victim"
    broken, victim = server.requests
    assert victim.connection != broken.connection
    response, body = await edge.get("/victim")
    assert body == b"answer for /victim"


PARTIAL_HEAD = b"HTTP/1.1 200 OK\r\nContent-Len"


@pytest.mark.slow
@pytest.mark.parametrize(
    "unsolicited",
    [POISON, POISON + POISON, PARTIAL_HEAD, b"JUNK\r\n\r\n"],
    ids=["response", "two-responses", "partial-head", "junk"],
)
async def test_bytes_an_idle_origin_connection_sends_are_never_an_answer(
    make_edge: EdgeFactory, raw_origin: RawOriginFactory, unsolicited: bytes
) -> None:
    """The origin answers, the connection goes back to the pool, and then the origin sends
    more: a late tail of a body longer than declared, or an attacker-shaped response. The next
    request must not take those bytes for its answer, nor be sent on that connection."""
    server = await raw_origin(by_target)
    edge = await edge_for(make_edge, server)
    _, body = await edge.get("/first")
    assert body == b"answer for /first"
    # The response has been read to its end, so the connection is idle in the pool. The
    # bytes are written before the next client request exists, so the proxy has them first.
    server.writers[0].write(unsolicited)
    await server.writers[0].drain()

    response, body = await edge.get("/victim")
    assert body == b"answer for /victim"
    assert "hit" not in response.headers["Cache-Status"]
    first, victim = server.requests
    # Shorter than a head, the bytes never reach aiohttp's new parser for the next request,
    # so that connection may be reused: the right answer above is the proof.
    if unsolicited != PARTIAL_HEAD:
        assert victim.connection != first.connection
        await until(lambda: first.connection in server.closed)
    response, body = await edge.get("/victim")
    assert body == b"answer for /victim"
    assert "hit" in response.headers["Cache-Status"]
