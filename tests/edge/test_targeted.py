"""Through the edge: CDN-targeted directives, Surrogate-Capability, the fields a fill passes on,
and serving stale while the origin fails."""

from __future__ import annotations

from email.utils import formatdate

import pytest
from aiohttp import web

from tests.conftest import EdgeFactory, EdgeUnderTest, Origin
from tests.polling import until


async def test_cdn_cache_control_rules_the_edge_and_cache_control_reaches_clients(
    edge: EdgeUnderTest, origin: Origin
) -> None:
    """RFC 9213: the edge keeps it for CDN-Cache-Control's max-age, whatever Cache-Control
    tells browsers, and passes both fields on."""
    origin.reply(
        "/t", b"x", headers={"Cache-Control": "no-store", "CDN-Cache-Control": "max-age=60"}
    )
    await edge.get("/t")
    response, body = await edge.get("/t")
    assert body == b"x"
    assert "hit" in response.headers["Cache-Status"]
    assert response.headers["Cache-Control"] == "no-store"
    assert response.headers["CDN-Cache-Control"] == "max-age=60"
    edge.clock.advance(61)
    await edge.get("/t")
    assert origin.count("/t") == 2


async def test_surrogate_capability_is_sent_and_targeted_control_obeyed(
    edge: EdgeUnderTest, origin: Origin
) -> None:
    """The edge names itself in Surrogate-Capability; Surrogate-Control items targeted at
    that name apply, those for other surrogates do not."""
    origin.reply(
        "/mine", b"m", headers={"Surrogate-Control": "max-age=60;cdn-proxy, no-store;other"}
    )
    origin.reply(
        "/theirs",
        b"t",
        headers={"Surrogate-Control": "max-age=60;other", "Cache-Control": "no-store"},
    )
    await edge.get("/mine", headers={"Surrogate-Capability": 'fake="Surrogate/1.0"'})
    await edge.get("/theirs")
    assert origin.seen[0].headers["Surrogate-Capability"] == 'cdn-proxy="Surrogate/1.0"'
    assert [v for k, v in origin.seen[0].header_items if k == "Surrogate-Capability"] == [
        'cdn-proxy="Surrogate/1.0"'
    ]
    mine, _ = await edge.get("/mine")
    theirs, _ = await edge.get("/theirs")
    assert "hit" in mine.headers["Cache-Status"]
    assert "hit" not in theirs.headers["Cache-Status"]
    assert origin.count("/mine") == 1
    assert origin.count("/theirs") == 2


async def test_the_filling_client_gets_fields_that_the_stored_copy_drops(
    edge: EdgeUnderTest, origin: Origin
) -> None:
    """§5.2.2.4: no-cache="X-User" lets the response be stored without X-User; the client
    whose request filled it still gets the origin's response whole."""
    origin.reply(
        "/q", b"q", headers={"Cache-Control": 'no-cache="X-User", max-age=60', "X-User": "u1"}
    )
    first, _ = await edge.get("/q")
    assert first.headers["X-User"] == "u1"
    second, body = await edge.get("/q")
    assert body == b"q"
    assert "hit" in second.headers["Cache-Status"]
    assert "X-User" not in second.headers


def flaky(origin: Origin, target: str, cache_control: str) -> list[str]:
    """Answer ``target`` once, then fail in the way the returned list's last item says:
    "close" (drop the connection) or a status code."""
    mode = ["ok"]

    async def handler(request: web.Request) -> web.StreamResponse:
        if mode[-1] == "ok":
            return web.Response(body=b"good", headers={"Cache-Control": cache_control})
        if mode[-1] == "close":
            assert request.transport is not None
            request.transport.close()
            return web.Response(body=b"never sent")
        return web.Response(status=int(mode[-1]), body=b"origin error")

    origin.route(target, handler)
    return mode


async def test_stale_is_served_while_the_origin_is_down_when_the_domain_allows(
    make_edge: EdgeFactory, origin: Origin
) -> None:
    """RFC 9111 §4.2.4: a disconnected cache may serve stale; the domain's stale_if_error
    bounds how long."""
    edge = await make_edge(
        domains=[
            {"name": "example.com", "origin": origin.url, "read_timeout": 5, "stale_if_error": 60}
        ]
    )
    mode = flaky(origin, "/s", "max-age=10")
    await edge.get("/s")
    mode.append("close")
    edge.clock.advance(30)
    response, body = await edge.get("/s")
    assert (response.status, body) == (200, b"good")
    assert 'detail="stale-if-error"' in response.headers["Cache-Status"]
    edge.clock.advance(60)  # now 80 s past expiry: beyond the window
    response, _ = await edge.get("/s")
    assert response.status == 502


async def test_must_revalidate_is_never_served_stale(
    make_edge: EdgeFactory, origin: Origin
) -> None:
    edge = await make_edge(
        domains=[
            {"name": "example.com", "origin": origin.url, "read_timeout": 5, "stale_if_error": 60}
        ]
    )
    mode = flaky(origin, "/m", "max-age=10, must-revalidate")
    await edge.get("/m")
    mode.append("close")
    edge.clock.advance(20)
    response, body = await edge.get("/m")
    assert response.status == 502
    assert body != b"good"


async def test_a_5xx_is_answered_stale_only_with_stale_if_error(
    edge: EdgeUnderTest, origin: Origin
) -> None:
    """RFC 5861 §4: stale-if-error lets a 5xx be replaced by the stale copy, for that long."""
    allowed = flaky(origin, "/a", "max-age=10, stale-if-error=60")
    plain = flaky(origin, "/p", "max-age=10")
    await edge.get("/a")
    await edge.get("/p")
    allowed.append("503")
    plain.append("503")
    edge.clock.advance(30)
    response, body = await edge.get("/a")
    assert (response.status, body) == (200, b"good")
    response, body = await edge.get("/p")
    assert (response.status, body) == (503, b"origin error")
    edge.clock.advance(60)
    response, body = await edge.get("/a")
    assert (response.status, body) == (503, b"origin error")


def versioned(edge: EdgeUnderTest, origin: Origin, target: str, cache_control: str) -> None:
    """Answer ``target`` with v1, v2, ... so a test can tell which response it got; Date
    comes from the edge's clock, so age is what the test says."""

    async def handler(request: web.Request) -> web.StreamResponse:
        version = origin.count(target)
        fields = {"Cache-Control": cache_control, "Date": formatdate(edge.clock(), usegmt=True)}
        return web.Response(body=f"v{version}".encode(), headers=fields)

    origin.route(target, handler)


async def test_stale_while_revalidate_answers_at_once_and_refreshes_behind(
    edge: EdgeUnderTest, origin: Origin
) -> None:
    """RFC 5861 §3: within the window the stale copy answers at once; one background
    request refreshes it, and the next client gets the new one as a hit."""
    versioned(edge, origin, "/w", "max-age=10, stale-while-revalidate=60")
    await edge.get("/w")
    edge.clock.advance(30)
    # Request directives that ask for nothing fresher (an extension) do not stop it.
    response, body = await edge.get("/w", headers={"Cache-Control": "x-extension"})
    assert body == b"v1"
    assert response.headers["Cache-Status"] == ('cdn-proxy; hit; detail="stale-while-revalidate"')
    await until(lambda: origin.count("/w") == 2 and not edge.edge.flights)
    response, body = await edge.get("/w")
    assert body == b"v2"
    assert response.headers["Cache-Status"] == "cdn-proxy; hit"
    assert origin.count("/w") == 2


async def test_a_stale_while_revalidate_hit_is_counted_once(
    edge: EdgeUnderTest, origin: Origin
) -> None:
    """The client's stale answer is one request, a hit; the revalidation behind it answers no
    client and is not counted as a second request (it was, as a "stale" miss)."""
    versioned(edge, origin, "/w", "max-age=10, stale-while-revalidate=60")
    await edge.get("/w")
    edge.clock.advance(30)
    response, _ = await edge.get("/w")
    assert response.headers["Cache-Status"] == ('cdn-proxy; hit; detail="stale-while-revalidate"')
    await until(lambda: origin.count("/w") == 2 and not edge.edge.flights)
    counts = edge.telemetry.domain_counts("example.com")
    assert (counts.hits, counts.misses, counts.stale, counts.errors) == (1, 1, 0, 0)


@pytest.mark.parametrize(
    ("cache_control", "request_headers", "advance"),
    [
        ("max-age=10, stale-while-revalidate=60", {}, 80),  # past the window
        ("max-age=10, stale-while-revalidate=60, must-revalidate", {}, 30),
        ("max-age=10, stale-while-revalidate=60", {"Cache-Control": "max-age=5"}, 30),
        ("max-age=10, stale-while-revalidate=60", {"Pragma": "no-cache"}, 30),
    ],
)
async def test_stale_while_revalidate_does_not_apply(
    edge: EdgeUnderTest,
    origin: Origin,
    cache_control: str,
    request_headers: dict[str, str],
    advance: float,
) -> None:
    versioned(edge, origin, "/n", cache_control)
    await edge.get("/n")
    edge.clock.advance(advance)
    response, body = await edge.get("/n", headers=request_headers)
    assert body == b"v2"  # revalidated before answering
    assert "hit" not in response.headers["Cache-Status"]
