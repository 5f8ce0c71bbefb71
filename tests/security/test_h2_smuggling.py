"""Request smuggling through HTTP/2 framing fields (issue 30, hole 1), seen from a raw origin
that records every byte it is sent.

An HTTP/2 request is framed by its frames, not by ``content-length``; the field is only a
claim the edge must check (RFC 9113 §8.1.1). Forwarded as it was, a claim with no body behind
it (a HEADERS frame with END_STREAM) made the origin read the next request on that pooled
connection as the body: the attacker's second stream then chose what was fetched and stored
for an innocent URL. The rules held here:

- a ``content-length`` that differs from the DATA received is malformed, END_STREAM on the
  head included, and so is a repeated or non-numeric one: the stream is reset, never sent on;
- the client's Content-Length and Transfer-Encoding never reach the origin: the origin client
  frames the body the edge actually sends (``to_origin``), on HTTP/2 and HTTP/1.1 alike.
"""

from __future__ import annotations

import pytest
from h2.errors import ErrorCodes

from proxy.process.service import Service
from tests.edge.h2_support import RawH2
from tests.security.support import OriginRequest, RawOrigin, Responder, exchange, ok

HOST = b"Host: example.com\r\n"


@pytest.fixture
def responder() -> Responder:
    return by_target


def by_target(request: OriginRequest) -> bytes:
    return ok(b"answer for " + request.target.encode() + b" " + request.body)


def framing(request: OriginRequest) -> list[str]:
    return request.header("content-length") + request.header("transfer-encoding")


async def test_a_length_on_a_head_that_ends_the_stream_is_never_forwarded(
    h2_client: RawH2, raw_server: RawOrigin
) -> None:
    """The issue's attack: stream 1 claims 57 bytes and ends; stream 3 carries the request
    the origin would have read inside them. Stream 1 is reset; stream 3 is answered for its
    own URL and is the only request the origin sees."""
    first_id = h2_client.request("/a", headers=[("content-length", "57")])
    smuggled = ("x", "GET /secret.html HTTP/1.0")
    second_id = h2_client.request("/static/app.js", headers=[smuggled])
    first = await h2_client.answer(first_id)
    second = await h2_client.answer(second_id)
    assert first.reset == ErrorCodes.PROTOCOL_ERROR and first.status == 0
    assert (second.status, second.body) == (200, b"answer for /static/app.js ")
    assert [r.target for r in raw_server.requests] == ["/static/app.js"]
    [forwarded] = raw_server.requests
    assert framing(forwarded) == [] and forwarded.body == b""
    assert forwarded.head.startswith(b"GET /static/app.js HTTP/1.1\r\n")


@pytest.mark.parametrize(
    "lengths",
    [("5", "5"), ("5", "6"), ("5, 5",), ("x5",), ("+5",), ("9" * 5000,), ("1" * 20,)],
    ids=["repeated", "differing", "list", "letters", "sign", "5000-digits", "20-digits"],
)
async def test_repeated_or_malformed_lengths_reset_the_stream(
    h2_client: RawH2, raw_server: RawOrigin, lengths: tuple[str, ...]
) -> None:
    fields = [("content-length", value) for value in lengths]
    stream = h2_client.request("/p", method="POST", headers=fields, body=b"hello")
    answer = await h2_client.answer(stream)
    after = h2_client.request("/after")
    followed = await h2_client.answer(after)
    assert answer.reset == ErrorCodes.PROTOCOL_ERROR and answer.status == 0
    assert (followed.status, followed.body) == (200, b"answer for /after ")  # the connection lives
    assert [r.target for r in raw_server.requests] == ["/after"]


@pytest.mark.parametrize("declared", [True, False], ids=["with-length", "without-length"])
async def test_a_body_reaches_the_origin_framed_by_the_edge(
    h2_client: RawH2, raw_server: RawOrigin, declared: bool
) -> None:
    fields = [("content-length", "5")] if declared else []
    stream = h2_client.request("/up", method="POST", headers=fields, body=b"hello")
    answer = await h2_client.answer(stream)
    assert (answer.status, answer.body) == (200, b"answer for /up hello")
    [forwarded] = raw_server.requests
    assert forwarded.header("content-length") == ["5"] and forwarded.body == b"hello"
    assert forwarded.header("transfer-encoding") == []


async def test_a_length_that_differs_from_the_data_resets_the_stream(
    h2_client: RawH2, raw_server: RawOrigin
) -> None:
    short = h2_client.request("/up", method="POST", headers=[("content-length", "9")], body=b"hi")
    answer = await h2_client.answer(short)
    assert answer.reset == ErrorCodes.PROTOCOL_ERROR
    assert all(r.body in (b"", b"hi") and r.complete is False for r in raw_server.requests)


async def test_a_get_with_a_body_over_http2_is_forwarded_framed_by_the_edge(
    h2_client: RawH2, raw_server: RawOrigin
) -> None:
    """A GET with a body is forwarded, never filled (a fat GET: tests/security/
    test_query_and_fat_get.py), with the body framed by the edge; the cache keeps nothing of
    it, so the next GET without one is asked of the origin."""
    stream = h2_client.request("/g", headers=[("content-length", "5")], body=b"hello")
    answer = await h2_client.answer(stream)
    plain = await h2_client.answer(h2_client.request("/g"))
    assert (answer.status, answer.body) == (200, b"answer for /g hello")
    assert (plain.status, plain.body) == (200, b"answer for /g ")
    fat, fetched = raw_server.requests
    assert framing(fat) == ["5"] and fat.body == b"hello"
    assert framing(fetched) == [] and fetched.body == b""


@pytest.mark.slow
async def test_a_get_with_a_body_over_http11_is_forwarded_framed_by_the_edge(
    tls_service: Service, raw_server: RawOrigin
) -> None:
    """HTTP/1.1 cannot reach the same state: the edge's parser reads the GET's body by its
    length, the origin gets it under a length the edge set, and the request that follows on
    the client's connection is its own."""
    assert tls_service.edge_url is not None
    request = b"GET /g HTTP/1.1\r\n" + HOST + b"Content-Length: 5\r\n\r\nhello"
    after = b"GET /after HTTP/1.1\r\n" + HOST + b"Connection: close\r\n\r\n"
    answer = await exchange(tls_service.edge_url, request + after)
    assert answer.statuses == [200, 200]
    fat, plain = raw_server.requests
    assert (fat.target, framing(fat), fat.body) == ("/g", ["5"], b"hello")
    assert (plain.target, framing(plain), plain.body) == ("/after", [], b"")
