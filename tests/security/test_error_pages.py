"""Issue 24, "Decide": a request aiohttp cannot parse is answered with the edge's own 400,
which never echoes the offending bytes (aiohttp's own page did, as text/plain without
``nosniff``: reflected content a browser might sniff as HTML). On both listeners of a
running service, as ``cdn-proxy serve`` runs them."""

from __future__ import annotations

import pytest

from proxy.process.service import Service
from tests.security.conftest import Site
from tests.security.support import exchange

MARK = b"<script>alert(24)</script>"
MALFORMED = [
    MARK + b" / HTTP/1.1\r\nHost: example.com\r\n\r\n",  # a method that is not a token
    b"GET / HTTP/1.1\r\nHost: example.com\r\nX-Bad: " + MARK + b"\x01\r\n\r\n",  # a CTL
    b"GET / HTTP/1.1\r\nHost: example.com\r\n" + MARK + b": x\r\n\r\n",  # a bad field name
    b"GET /" + MARK + b" HTTP/9.9\r\nHost: example.com\r\n\r\n",  # an unknown version
    b"GET / HTTP/1.1\r\nHost: example.com\r\nContent-Length: " + MARK + b"\r\n\r\n",
]


@pytest.mark.slow
@pytest.mark.parametrize("listener", ["edge", "api"])
@pytest.mark.parametrize("request_bytes", MALFORMED)
async def test_a_malformed_request_gets_our_400_without_its_bytes(
    service: Service, origin: Site, listener: str, request_bytes: bytes
) -> None:
    url = service.edge_url if listener == "edge" else service.api_url
    answer = await exchange(url, request_bytes)
    [response] = answer.responses
    assert response.status == 400
    assert response.body == b"400 Bad Request: the request could not be read\n"
    assert response.header("X-Content-Type-Options") == "nosniff"
    assert response.header("Content-Type") == "text/plain; charset=utf-8"
    assert response.header("Cache-Control") == "no-store"
    assert b"script" not in answer.data
    assert answer.closed
    assert origin.seen == []
