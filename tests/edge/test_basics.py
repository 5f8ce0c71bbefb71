"""Routing, miss and hit, and the headers every proxied response carries."""

from __future__ import annotations

import pytest

from tests.conftest import EdgeUnderTest, Origin

CACHEABLE = {"Cache-Control": "max-age=60", "Content-Type": "text/plain"}


async def test_miss_then_hit(edge: EdgeUnderTest, origin: Origin) -> None:
    origin.reply("/page", b"page body", headers=CACHEABLE)

    first, body = await edge.get("/page")
    assert first.status == 200
    assert body == b"page body"
    assert first.headers["Cache-Status"] == "cdn-proxy; fwd=uri-miss; stored"
    assert first.headers["Age"] == "0"

    second, body = await edge.get("/page")
    assert second.status == 200
    assert body == b"page body"
    assert second.headers["Cache-Status"] == "cdn-proxy; hit"
    assert int(second.headers["Age"]) >= 0
    assert second.headers["Content-Type"] == "text/plain"
    assert origin.count("/page") == 1


async def test_head_is_answered_from_the_get_entry(edge: EdgeUnderTest, origin: Origin) -> None:
    origin.reply("/h", b"0123456789", headers=CACHEABLE)
    await edge.get("/h")
    response, body = await edge.get("/h", method="HEAD")
    assert response.status == 200
    assert body == b""
    assert response.headers["Content-Length"] == "10"
    assert response.headers["Cache-Status"].startswith("cdn-proxy; hit")
    assert origin.count("/h") == 1


async def test_head_miss_goes_to_origin_as_head_and_is_not_stored(
    edge: EdgeUnderTest, origin: Origin
) -> None:
    origin.reply("/h", b"0123456789", headers=CACHEABLE)
    response, body = await edge.get("/h", method="HEAD")
    assert response.status == 200
    assert body == b""
    assert response.headers["Content-Length"] == "10"
    assert [s.method for s in origin.seen] == ["HEAD"]
    second, _ = await edge.get("/h")
    assert "fwd=uri-miss; stored" in second.headers["Cache-Status"]


async def test_unknown_host_is_refused_and_never_forwarded(
    edge: EdgeUnderTest, origin: Origin
) -> None:
    for host in ("unknown.example", "example.com.evil", "127.0.0.1", "[::1]", "exa mple.com"):
        response, body = await edge.get("/x", host=host)
        assert response.status == 421, host
        assert b"does not serve that host" in body
    assert origin.seen == []


async def test_host_spellings_share_one_domain(edge: EdgeUnderTest, origin: Origin) -> None:
    origin.reply("/s", b"same", headers=CACHEABLE)
    await edge.get("/s", host="example.com")
    for host in ("EXAMPLE.com", "example.com.", "example.com:8080", "Example.COM.:80"):
        response, body = await edge.get("/s", host=host)
        assert body == b"same"
        assert "hit" in response.headers["Cache-Status"], host
    assert origin.count("/s") == 1
    assert origin.seen[0].headers["Host"] == "example.com"


async def test_domains_do_not_share_entries(edge: EdgeUnderTest, origin: Origin) -> None:
    origin.reply("/d", b"one", headers=CACHEABLE)
    await edge.get("/d", host="example.com")
    response, _ = await edge.get("/d", host="other.test")
    assert "fwd=uri-miss" in response.headers["Cache-Status"]
    assert origin.count("/d") == 2


async def test_target_is_keyed_exactly_as_received(edge: EdgeUnderTest, origin: Origin) -> None:
    for target in ("/a/b", "/a%2fb", "/a%2Fb", "/%61/b", "/a/b?x=1", "/a/./b"):
        origin.reply(target, target.encode(), headers=CACHEABLE)
    for target in ("/a/b", "/a%2fb", "/a%2Fb", "/%61/b", "/a/b?x=1", "/a/./b"):
        response, body = await edge.get(target)
        assert body == target.encode(), target
        assert "fwd=uri-miss" in response.headers["Cache-Status"], target
    assert [s.target for s in origin.seen] == [
        "/a/b",
        "/a%2fb",
        "/a%2Fb",
        "/%61/b",
        "/a/b?x=1",
        "/a/./b",
    ]


async def test_via_and_forwarding_headers_are_set_by_the_proxy(
    edge: EdgeUnderTest, origin: Origin
) -> None:
    origin.reply("/f", b"x", headers={"Cache-Control": "no-store", "Via": "1.1 origin-lb"})
    response, _ = await edge.get(
        "/f",
        headers={
            "X-Forwarded-For": "6.6.6.6",
            "X-Forwarded-Host": "evil.example",
            "X-Forwarded-Proto": "https",
            "Forwarded": "for=6.6.6.6;host=evil.example",
            "X-Real-IP": "6.6.6.6",
            "X-Original-URL": "/admin",
            "Via": "1.1 client-proxy",
        },
    )
    seen = origin.seen[0].headers
    assert seen["X-Forwarded-For"] == "127.0.0.1"
    assert seen["X-Forwarded-Host"] == "example.com"
    assert seen["X-Forwarded-Proto"] == "http"
    assert seen["Via"] == "1.1 client-proxy, 1.1 cdn-proxy"
    assert "Forwarded" not in seen
    assert "X-Real-IP" not in seen
    assert "X-Original-URL" not in seen
    assert response.headers["Via"] == "1.1 origin-lb, 1.1 cdn-proxy"


@pytest.mark.slow
async def test_hop_by_hop_headers_are_removed_both_ways(
    edge: EdgeUnderTest, origin: Origin
) -> None:
    origin.reply(
        "/hop",
        b"x",
        headers={
            "Cache-Control": "max-age=60",
            "Connection": "X-Secret-Hop",
            "X-Secret-Hop": "origin-only",
            "Keep-Alive": "timeout=5",
            "Proxy-Authenticate": "Basic",
        },
    )
    response, _ = await edge.get(
        "/hop",
        headers={
            "Connection": "keep-alive, X-Client-Hop",
            "X-Client-Hop": "client-only",
            "Proxy-Authorization": "Basic Zm9vOmJhcg==",
            "TE": "trailers",
        },
    )
    seen = origin.seen[0].headers
    for name in ("X-Client-Hop", "Proxy-Authorization", "TE"):
        assert name not in seen, name
    for name in ("X-Secret-Hop", "Keep-Alive", "Proxy-Authenticate"):
        assert name not in response.headers, name
    cached, _ = await edge.get("/hop")
    assert "X-Secret-Hop" not in cached.headers
    assert "hit" in cached.headers["Cache-Status"]
