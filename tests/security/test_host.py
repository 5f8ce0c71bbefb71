"""Host header attacks: duplicate Host, spellings of a served domain, absolute-form targets
whose authority is another name, and names this edge does not serve.

The origin builds absolute links from the Host it receives, as password-reset and
canonical-link code does; a cache that forwards the client's spelling (with its port)
stores links to the attacker's port for everyone.
"""

from __future__ import annotations

import pytest
from aiohttp import web

from tests.conftest import EdgeUnderTest
from tests.security.conftest import Site
from tests.security.support import CACHEABLE, exchange


async def links_from_host(request: web.Request) -> web.StreamResponse:
    return web.Response(
        text=f'<a href="http://{request.headers["Host"]}/reset?token=1">reset</a>',
        headers={"Cache-Control": CACHEABLE},
    )


CLEAN = b'<a href="http://example.com/reset?token=1">reset</a>'


@pytest.mark.parametrize(
    "hosts",
    [
        (b"example.com", b"evil.example"),
        (b"evil.example", b"example.com"),
        (b"example.com", b"example.com"),
        (b"example.com", b"EXAMPLE.COM:8080"),
        (b"other.test", b"example.com"),
    ],
)
@pytest.mark.parametrize("second_name", [b"Host", b"host", b"HOST"])
async def test_duplicate_host_is_refused(
    edge: EdgeUnderTest, origin: Site, hosts: tuple[bytes, bytes], second_name: bytes
) -> None:
    """RFC 9112 §3.2: a request with more than one Host field gets 400."""
    origin.default = links_from_host
    first, second = hosts
    request = b"GET /r HTTP/1.1\r\nHost: %s\r\n%s: %s\r\n\r\n" % (first, second_name, second)
    answer = await exchange(edge.url, request)
    assert answer.statuses == [400]
    assert answer.closed
    assert origin.seen == []


@pytest.mark.parametrize(
    "host",
    ["EXAMPLE.COM", "example.com:8080", "Example.Com.:31337", "example.com.", "example.com:"],
)
async def test_host_spellings_share_the_domain_and_never_reach_the_origin(
    edge: EdgeUnderTest, origin: Site, host: str
) -> None:
    origin.default = links_from_host
    _, body = await edge.get("/reset", host=host)
    assert body == CLEAN
    victim, body = await edge.get("/reset")
    assert body == CLEAN
    assert "hit" in victim.headers["Cache-Status"]
    assert [seen.headers["Host"] for seen in origin.seen] == ["example.com"]


@pytest.mark.parametrize(
    ("target", "host"),
    [
        (b"http://evil.example/reset", b"example.com"),
        (b"http://other.test/reset", b"example.com"),
        (b"https://example.com/reset", b"other.test"),
        (b"http://example.com@evil.example/reset", b"example.com"),
        (b"http://evil.example:80@example.com/reset", b"example.com"),
        (b"http://evil.example#@example.com/reset", b"example.com"),
        (b"http://evil.example\\@example.com/reset", b"example.com"),
        (b"http://example.com.evil.example/reset", b"example.com"),
        (b"http://[::1]/reset", b"example.com"),
        (b"//evil.example/reset", b"evil.example"),
    ],
)
async def test_absolute_form_naming_another_authority_is_refused(
    edge: EdgeUnderTest, origin: Site, target: bytes, host: bytes
) -> None:
    """RFC 9112 §3.2.2: routed by one name and keyed or forwarded by another is refused."""
    origin.default = links_from_host
    request = b"GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % (target, host)
    answer = await exchange(edge.url, request)
    [response] = answer.responses
    assert response.status in (400, 421)
    assert origin.seen == []
    assert (await edge.store.stats()).entries == 0


async def test_absolute_form_for_the_host_s_own_domain_shares_its_entry(
    edge: EdgeUnderTest, origin: Site
) -> None:
    origin.default = links_from_host
    request = b"GET http://EXAMPLE.com:80/reset HTTP/1.1\r\nHost: example.com\r\n\r\n"
    answer = await exchange(edge.url, request, keep_open=True)
    [response] = answer.responses
    assert response.body == CLEAN
    victim, body = await edge.get("/reset")
    assert body == CLEAN
    assert "hit" in victim.headers["Cache-Status"]
    assert [(seen.target, seen.headers["Host"]) for seen in origin.seen] == [
        ("/reset", "example.com")
    ]


UNKNOWN = [
    "evil.example",
    "example.com.evil.example",
    "evil-example.com",
    "xn--exmple-cua.com",  # exämple.com
    "\u0435xample.com",  # Cyrillic ie for the first e
    "127.0.0.1",
    "localhost",
    "[::1]",
    "example.com:80@evil.example",
    "example.com..",
    "example.com:port",
    ".example.com",
    "*.example.com",
    "example.com/x",
    "",
]


@pytest.mark.slow
@pytest.mark.parametrize("host", UNKNOWN)
async def test_unknown_host_is_never_proxied(edge: EdgeUnderTest, origin: Site, host: str) -> None:
    origin.default = links_from_host
    for method in ("GET", "POST"):
        response, _ = await edge.get("/reset", host=host, method=method)
        assert response.status == 421, (host, method)
        assert response.headers["Cache-Control"] == "no-store"
    assert origin.seen == []
    assert (await edge.store.stats()).entries == 0
