"""Cache-poisoned denial of service (CPDoS): the attacker makes the origin answer one request
with an error, through a header the cache does not key on, and the cache serves that error to
everyone.

- HHO (oversized headers): headers the edge accepts but a stricter origin refuses.
- HMC (meta characters): control characters an origin might refuse.
- HMO (method override): X-HTTP-Method-Override and kin turning a GET into something the
  origin refuses.

No error an attacker provokes is ever stored and served to a clean request, and error
statuses are never given a heuristic lifetime.
"""

from __future__ import annotations

from email.utils import formatdate

import pytest
from aiohttp import web

from tests.conftest import EdgeFactory, EdgeUnderTest
from tests.polling import until
from tests.security.conftest import Site
from tests.security.support import CACHEABLE, exchange

PAGE = b"the page"


async def heuristic_edge(make_edge: EdgeFactory, origin: Site) -> EdgeUnderTest:
    return await make_edge(
        domains=[{"name": "example.com", "origin": origin.url, "heuristic_freshness": True}]
    )


def error_headers(now: float) -> dict[str, str]:
    """What an error page from a static-file server or framework may carry: validators and a
    date, which make it heuristically cacheable where a cache allows that."""
    return {"Last-Modified": formatdate(now - 86_400, usegmt=True), "Date": formatdate(now)}


@pytest.mark.parametrize("status", [400, 413, 431])
async def test_oversized_headers_refused_by_the_origin_are_not_stored(
    make_edge: EdgeFactory, origin: Site, status: int
) -> None:
    """HHO: the edge passes a 6 KB header; the origin's limit is 4 KB."""
    edge = await heuristic_edge(make_edge, origin)
    now = edge.clock()

    async def strict_origin(request: web.Request) -> web.StreamResponse:
        size = sum(len(name) + len(value) + 4 for name, value in request.headers.items())
        if size > 4096:
            return web.Response(status=status, text="headers too large", headers=error_headers(now))
        return web.Response(body=PAGE, headers={"Cache-Control": CACHEABLE})

    origin.default = strict_origin
    attack, _ = await edge.get("/page", headers={"X-Oversized": "a" * 6000})
    assert attack.status == status
    victim, body = await edge.get("/page")
    assert (victim.status, body) == (200, PAGE)
    assert len(origin.seen) == 2


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GET /page HTTP/1.1\r\nHost: example.com\r\nX-Oversized: " + b"a" * 9000 + b"\r\n\r\n",
        b"GET /page HTTP/1.1\r\nHost: example.com\r\n"
        + b"".join(b"X-Many-%d: a\r\n" % n for n in range(40_000))
        + b"\r\n",
        b"GET /page?" + b"a" * 9000 + b" HTTP/1.1\r\nHost: example.com\r\n\r\n",
    ],
    ids=["long-field", "many-fields", "long-target"],
)
async def test_headers_too_large_for_the_edge_are_refused_before_the_origin(
    edge: EdgeUnderTest, origin: Site, request_bytes: bytes
) -> None:
    origin.reply("/page", PAGE, headers={"Cache-Control": CACHEABLE})
    answer = await exchange(edge.url, request_bytes)
    [response] = answer.responses
    assert response.status in (400, 413, 414, 431)
    assert answer.closed
    assert origin.seen == []
    victim, body = await edge.get("/page")
    assert (victim.status, body) == (200, PAGE)


CONTROL = [bytes([c]) for c in (*range(0x00, 0x09), *range(0x0A, 0x20), 0x7F) if c not in (10, 13)]


@pytest.mark.parametrize("where", ["value", "name", "target"])
@pytest.mark.parametrize("control", CONTROL, ids=[f"0x{c[0]:02x}" for c in CONTROL])
async def test_control_characters_are_refused_before_the_origin(
    edge: EdgeUnderTest, origin: Site, control: bytes, where: str
) -> None:
    """HMC: a byte no field or target may hold gets a 400 from the edge itself, which is never
    stored, and reaches no origin that might answer it with an error of its own."""
    origin.reply("/page", PAGE, headers={"Cache-Control": CACHEABLE})
    target, name, value = b"/page", b"X-Meta", b"a" + control + b"b"
    if where == "name":
        name, value = b"X-Me" + control + b"ta", b"ab"
    elif where == "target":
        target, value = b"/page" + control, b"ab"
    answer = await exchange(
        edge.url, b"GET %s HTTP/1.1\r\nHost: example.com\r\n%s: %s\r\n\r\n" % (target, name, value)
    )
    assert answer.statuses == [400]
    assert answer.closed
    assert origin.seen == []
    victim, body = await edge.get("/page")
    assert (victim.status, body) == (200, PAGE)


OVERRIDES = [
    "X-HTTP-Method-Override",
    "X-HTTP-Method",
    "X-Method-Override",
    "x-http-method-override",
    "X_HTTP_Method_Override",
    "X-HTTP-Method_Override",
]


def honours_overrides(request: web.Request) -> str:
    """The method as a framework that honours override headers sees it (CGI-style names)."""
    for name, value in request.headers.items():
        if name.upper().replace("_", "-") in (
            "X-HTTP-METHOD-OVERRIDE",
            "X-HTTP-METHOD",
            "X-METHOD-OVERRIDE",
        ):
            return value.upper()
    return request.method


@pytest.mark.parametrize("method", ["DELETE", "POST", "PUT", "PATCH"])
@pytest.mark.parametrize("name", OVERRIDES)
async def test_method_override_never_turns_a_cacheable_get_into_an_error(
    edge: EdgeUnderTest, origin: Site, name: str, method: str
) -> None:
    """HMO: the origin refuses the overridden method with a 405 it even marks cacheable. It
    must never see the override on a request whose answer the cache may store."""

    async def app(request: web.Request) -> web.StreamResponse:
        if honours_overrides(request) != "GET":
            return web.Response(
                status=405, text="method not allowed", headers={"Cache-Control": CACHEABLE}
            )
        return web.Response(body=PAGE, headers={"Cache-Control": CACHEABLE})

    origin.default = app
    await edge.get("/page", headers={name: method})
    victim, body = await edge.get("/page")
    assert (victim.status, body) == (200, PAGE)
    for seen in origin.seen:
        assert honours_overrides_names(seen.header_items) == [], seen.header_items


def honours_overrides_names(items: list[tuple[str, str]]) -> list[str]:
    return [
        name
        for name, _ in items
        if name.upper().replace("_", "-")
        in ("X-HTTP-METHOD-OVERRIDE", "X-HTTP-METHOD", "X-METHOD-OVERRIDE")
    ]


@pytest.mark.parametrize("status", [400, 403, 404, 405, 410, 414, 421, 429, 500, 501, 502, 503])
async def test_error_statuses_are_never_cached_heuristically(
    make_edge: EdgeFactory, origin: Site, status: int
) -> None:
    """RFC 9111 §4.2.2 lets a cache guess a lifetime for some errors (404, 405, 410, 414,
    501); this one never does, on a domain with heuristic freshness too: an error the
    attacker provoked would otherwise be served for hours."""
    edge = await heuristic_edge(make_edge, origin)
    origin.reply("/e", b"an error", status=status, headers=error_headers(edge.clock()))
    first, _ = await edge.get("/e")
    assert "stored" not in first.headers["Cache-Status"]
    second, _ = await edge.get("/e")
    assert second.status == status
    assert "hit" not in second.headers["Cache-Status"]
    assert len(origin.seen) == 2


@pytest.mark.slow
async def test_an_origin_failure_is_never_stored(edge: EdgeUnderTest, origin: Site) -> None:
    """The proxy's own 502 for a dropped connection is never stored: the next request goes to
    the origin again."""
    healthy = False

    async def flaky(request: web.Request) -> web.StreamResponse:
        if not healthy:
            assert request.transport is not None
            request.transport.abort()
        return web.Response(body=PAGE, headers={"Cache-Control": CACHEABLE})

    origin.default = flaky
    failed, _ = await edge.get("/page")
    assert failed.status == 502
    assert failed.headers["Cache-Control"] == "no-store"
    await until(lambda: edge.edge.flights.get(("example.com", 0, "/page")) is None)
    healthy = True
    victim, body = await edge.get("/page")
    assert (victim.status, body) == (200, PAGE)
