"""The origin boundary (issue 30, "Proof that stays in the tests"): whatever request shape a
client sends, over HTTP/1.1 or HTTP/2, an origin receives only well-formed HTTP/1.1, with the
body framing the edge chose and exactly the body the edge meant to send.

The origin here records every byte of every connection (tests/security/support.py's
``RawOrigin``), and each connection's bytes are read back by h11 as a strict server: any
byte h11 refuses (a bad request line, a field with a control, two framings, a body longer
or shorter than its framing, a request smuggled inside a body) fails the test. Every request
head must also come from ``headers.to_origin`` (it carries the edge's Via), and carry no
field a client may not pass on.
"""

from __future__ import annotations

import h11
import pytest

from proxy.process.service import Service
from tests.edge.h2_support import RawH2
from tests.edge.tls_support import Certificates
from tests.security.support import OriginRequest, RawOrigin, Responder, exchange, ok

HOST = b"Host: example.com\r\n"


@pytest.fixture
def responder() -> Responder:
    return by_target


def by_target(request: OriginRequest) -> bytes:
    answer = ok(b"answer for " + request.target.encode(), cache_control="no-store")
    if request.head.startswith(b"HEAD "):
        return answer.partition(b"\r\n\r\n")[0] + b"\r\n\r\n"  # a HEAD's answer: no body
    return answer


def read_strictly(data: bytes) -> list[tuple[h11.Request, bytes]]:
    """Every request in one connection's bytes, read by h11 as a server: a request and its
    body each, or h11's RemoteProtocolError for anything that is not HTTP/1.1."""
    connection = h11.Connection(h11.SERVER)
    connection.receive_data(data)
    requests: list[tuple[h11.Request, bytes]] = []
    while True:
        event = connection.next_event()
        if event is h11.NEED_DATA or isinstance(event, h11.ConnectionClosed):
            assert connection.their_state in (h11.IDLE, h11.DONE, h11.CLOSED), (
                f"a request cut short: {data!r}"
            )
            return requests
        if event is h11.PAUSED:
            connection.send(h11.Response(status_code=200, headers=[("content-length", "0")]))
            connection.send(h11.EndOfMessage())
            connection.start_next_cycle()
            continue
        if isinstance(event, h11.Request):
            requests.append((event, b""))
        elif isinstance(event, h11.Data):
            request, body = requests[-1]
            requests[-1] = (request, body + event.data)


def check_boundary(raw_server: RawOrigin) -> list[tuple[h11.Request, bytes]]:
    seen: list[tuple[h11.Request, bytes]] = []
    for data in raw_server.received:
        for request, body in read_strictly(bytes(data)):
            fields = [(bytes(name).lower(), bytes(value)) for name, value in request.headers]
            names = [name for name, _ in fields]
            lengths = [value for name, value in fields if name == b"content-length"]
            chunked = b"transfer-encoding" in names
            assert not (lengths and chunked), request
            assert len(lengths) <= 1 and (not lengths or int(lengths[0]) == len(body)), request
            assert names.count(b"host") == 1 and (b"host", b"example.com") in fields, request
            assert any(name == b"via" and value.endswith(b"cdn-proxy") for name, value in fields)
            assert not {b"x-forwarded-user", b"forwarded", b"x-real-ip"} & set(names), request
            seen.append((request, body))
    return seen


HTTP11 = {
    "get": (b"GET /a?x=1 HTTP/1.1\r\n" + HOST + b"\r\n", b""),
    "head": (b"HEAD /a HTTP/1.1\r\n" + HOST + b"Connection: close\r\n\r\n", b""),
    "post-length": (b"POST /a HTTP/1.1\r\n" + HOST + b"Content-Length: 5\r\n\r\nhello", b"hello"),
    "post-chunked": (
        b"POST /a HTTP/1.1\r\n" + HOST + b"Transfer-Encoding: chunked\r\n\r\n"
        b"2\r\nhe\r\n3\r\nllo\r\n0\r\nX-Trailer: 1\r\n\r\n",
        b"hello",
    ),
    "put-empty": (b"PUT /a HTTP/1.1\r\n" + HOST + b"Content-Length: 0\r\n\r\n", b""),
    "delete": (b"DELETE /a HTTP/1.1\r\n" + HOST + b"\r\n", b""),
    "options": (b"OPTIONS /a HTTP/1.1\r\n" + HOST + b"\r\n", b""),
    "custom-method": (b"REPORT /a HTTP/1.1\r\n" + HOST + b"\r\n", b""),
    "fat-get": (b"GET /a HTTP/1.1\r\n" + HOST + b"Content-Length: 5\r\n\r\nhello", b"hello"),
    "absolute-form": (b"GET http://example.com/a HTTP/1.1\r\n" + HOST + b"\r\n", b""),
    "claims": (
        b"GET /a HTTP/1.1\r\n" + HOST + b"X-Forwarded-User: admin\r\nForwarded: for=1\r\n"
        b"X-Real-IP: 10.0.0.1\r\nContent_Length: 9\r\nTransfer_Encoding: chunked\r\n\r\n",
        b"",
    ),
    "expect-continue": (
        b"POST /a HTTP/1.1\r\n" + HOST + b"Expect: 100-continue\r\nContent-Length: 5\r\n"
        b"Connection: close\r\n\r\nhello",
        b"hello",
    ),
    "http10": (b"GET /a HTTP/1.0\r\n" + HOST + b"\r\n", b""),
}


@pytest.mark.parametrize("shape", list(HTTP11))
async def test_every_http11_shape_reaches_the_origin_as_well_formed_http11(
    tls_service: Service, raw_server: RawOrigin, shape: str
) -> None:
    request, body = HTTP11[shape]
    closes = b"Connection: close" in request
    answer = await exchange(tls_service.edge_url, request, keep_open=not closes)
    if shape == "head":  # an answer to HEAD has no body: read as bytes, not parsed by length
        assert answer.data.startswith(b"HTTP/1.1 200 "), answer
    else:
        assert answer.statuses[-1:] == [200] and set(answer.statuses[:-1]) <= {100}, answer
    [(forwarded, sent)] = check_boundary(raw_server)
    assert sent == body
    assert forwarded.target in (b"/a", b"/a?x=1")  # origin-form, whatever form it came in


H2: dict[str, tuple[str, list[tuple[str, str]], bytes | None]] = {
    "get": ("GET", [], None),
    "head": ("HEAD", [], None),
    "post-length": ("POST", [("content-length", "5")], b"hello"),
    "post-no-length": ("POST", [], b"hello"),
    "put-empty": ("PUT", [("content-length", "0")], None),
    "delete": ("DELETE", [], None),
    "custom-method": ("REPORT", [], None),
    "fat-get": ("GET", [("content-length", "5")], b"hello"),
    "cookie-crumbs": ("GET", [("cookie", "a=1"), ("cookie", "b=2")], None),
    "claims": ("GET", [("x-forwarded-user", "admin"), ("forwarded", "for=1")], None),
    "large-body": ("POST", [], b"x" * 300_000),
}


@pytest.mark.parametrize("shape", list(H2))
async def test_every_http2_shape_reaches_the_origin_as_well_formed_http11(
    tls_service: Service, raw_server: RawOrigin, certs: Certificates, shape: str
) -> None:
    method, fields, body = H2[shape]
    assert tls_service.tls_url is not None
    client = await RawH2.open(tls_service.tls_url, certs.client())
    try:
        stream = client.request("/a", method=method, headers=fields, end=body is None)
        if body is not None:
            await client.send_body(stream, body)
        answer = await client.answer(stream)
    finally:
        await client.close()
    assert answer.status == 200, answer
    [(forwarded, sent)] = check_boundary(raw_server)
    assert forwarded.method == method.encode() and sent == (body or b"")
    if shape == "cookie-crumbs":
        assert (b"cookie", b"a=1; b=2") in [(bytes(n), bytes(v)) for n, v in forwarded.headers]
