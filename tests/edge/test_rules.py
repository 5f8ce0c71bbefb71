"""The RFC 9111 shared-cache rules, end to end through the edge against a real origin."""

from __future__ import annotations

from email.utils import formatdate

import pytest
from aiohttp import web

from tests.conftest import EdgeFactory, EdgeUnderTest, Origin


@pytest.mark.parametrize(
    ("headers", "detail"),
    [
        ({"Cache-Control": "no-store, max-age=60"}, "no-store"),
        ({"Cache-Control": "private, max-age=60"}, "private"),
        ({"Cache-Control": "max-age=60", "Set-Cookie": "session=abc"}, "set-cookie"),
        ({"Cache-Control": "max-age=60", "Vary": "*"}, "vary-star"),
        ({}, "no-explicit-freshness"),
        ({"Last-Modified": formatdate(0, usegmt=True)}, "no-explicit-freshness"),
        ({"Cache-Control": "no-cache"}, "no-cache-without-validator"),
        ({"Cache-Control": "max-age=0"}, "stale-without-validator"),
    ],
)
async def test_responses_a_shared_cache_must_not_reuse(
    edge: EdgeUnderTest, origin: Origin, headers: dict[str, str], detail: str
) -> None:
    """RFC 9111 §3, §5.2.2.5 (no-store), §5.2.2.7 (private), §4.1 (Vary: *); plus the edge's
    own rules: no Set-Cookie in a shared cache, explicit freshness required."""
    origin.reply("/r", b"private data", headers=headers)
    first, _ = await edge.get("/r")
    assert first.headers["Cache-Status"] == f'cdn-proxy; fwd=uri-miss; detail="{detail}"'
    second, body = await edge.get("/r")
    assert body == b"private data"
    assert "hit" not in second.headers["Cache-Status"]
    assert origin.count("/r") == 2
    if "Set-Cookie" in headers:
        assert second.headers["Set-Cookie"] == "session=abc"  # passed on, never shared


async def test_s_maxage_wins_over_max_age(edge: EdgeUnderTest, origin: Origin) -> None:
    """§5.2.2.10: a shared cache uses s-maxage over max-age."""
    origin.reply("/s", b"x", headers={"Cache-Control": "max-age=0, s-maxage=60"})
    await edge.get("/s")
    response, _ = await edge.get("/s")
    assert "hit" in response.headers["Cache-Status"]
    edge.clock.advance(61)
    response, _ = await edge.get("/s")
    assert "hit" not in response.headers["Cache-Status"]
    assert origin.count("/s") == 2


async def test_expires_is_used_without_max_age(edge: EdgeUnderTest, origin: Origin) -> None:
    """§4.2.1: Expires minus Date when there is no max-age or s-maxage."""
    now = edge.clock()
    origin.reply(
        "/e",
        b"x",
        headers={
            "Date": formatdate(now, usegmt=True),
            "Expires": formatdate(now + 30, usegmt=True),
        },
    )
    await edge.get("/e")
    assert "hit" in (await edge.get("/e"))[0].headers["Cache-Status"]
    edge.clock.advance(31)
    assert "hit" not in (await edge.get("/e"))[0].headers["Cache-Status"]


async def test_max_age_freshness_and_age_header(edge: EdgeUnderTest, origin: Origin) -> None:
    """§4.2, §5.1: fresh until max-age; Age counts from the origin's answer."""
    origin.reply("/a", b"x", headers={"Cache-Control": "max-age=100", "Age": "10"})
    await edge.get("/a")
    edge.clock.advance(50)
    response, _ = await edge.get("/a")
    assert "hit" in response.headers["Cache-Status"]
    assert 60 <= int(response.headers["Age"]) <= 61
    edge.clock.advance(45)
    response, _ = await edge.get("/a")
    assert "fwd=stale" in response.headers["Cache-Status"]


async def test_authorization_responses_are_not_shared_unless_allowed(
    edge: EdgeUnderTest, origin: Origin
) -> None:
    """§3.5: a request with Authorization is stored only with public, s-maxage or
    must-revalidate."""
    origin.reply("/mine", b"alice's", headers={"Cache-Control": "max-age=60"})
    origin.reply("/pub", b"shared", headers={"Cache-Control": "public, max-age=60"})
    auth = {"Authorization": "Bearer alice"}
    first, _ = await edge.get("/mine", headers=auth)
    assert 'detail="authorization"' in first.headers["Cache-Status"]
    _, body = await edge.get("/mine")
    assert origin.count("/mine") == 2
    assert body == b"alice's"  # fetched again, not served from Alice's request
    await edge.get("/pub", headers=auth)
    response, _ = await edge.get("/pub")
    assert "hit" in response.headers["Cache-Status"]


async def test_heuristic_freshness_is_a_per_domain_option(
    make_edge: EdgeFactory, origin: Origin, tmp_path: object
) -> None:
    """§4.2.2: heuristic freshness only where the domain allows it, and only for
    heuristically cacheable statuses."""
    edge = await make_edge(
        domains=[
            {"name": "example.com", "origin": origin.url, "heuristic_freshness": True},
            {"name": "other.test", "origin": origin.url},
        ]
    )
    now = edge.clock()
    modified = {"Last-Modified": formatdate(now - 10_000, usegmt=True)}
    origin.reply("/h", b"x", headers=modified)
    origin.reply("/err", b"x", status=503, headers=modified)
    await edge.get("/h", host="example.com")
    assert "hit" in (await edge.get("/h", host="example.com"))[0].headers["Cache-Status"]
    await edge.get("/h", host="other.test")
    assert "hit" not in (await edge.get("/h", host="other.test"))[0].headers["Cache-Status"]
    await edge.get("/err", host="example.com")
    response, _ = await edge.get("/err", host="example.com")
    assert response.status == 503
    assert "hit" not in response.headers["Cache-Status"]
    assert origin.count("/err") == 2


async def test_vary_keeps_one_variant_per_request_header(
    edge: EdgeUnderTest, origin: Origin
) -> None:
    """§4.1: a stored response is used only for requests whose Vary'd headers match."""

    async def by_language(request: web.Request) -> web.StreamResponse:
        language = request.headers.get("Accept-Language", "none")
        return web.Response(
            text=f"hello in {language}",
            headers={"Cache-Control": "max-age=60", "Vary": "Accept-Language"},
        )

    origin.route("/v", by_language)
    _, en = await edge.get("/v", headers={"Accept-Language": "en"})
    _, fr = await edge.get("/v", headers={"Accept-Language": "fr"})
    assert (en, fr) == (b"hello in en", b"hello in fr")
    response, body = await edge.get("/v", headers={"Accept-Language": "en"})
    assert body == b"hello in en"
    assert "hit" in response.headers["Cache-Status"]
    response, body = await edge.get("/v", headers={"Accept-Language": "fr"})
    assert body == b"hello in fr"
    assert "hit" in response.headers["Cache-Status"]
    response, body = await edge.get("/v")
    assert body == b"hello in none"
    assert "fwd=vary-miss" in response.headers["Cache-Status"]
    assert origin.count("/v") == 3


async def test_stale_entry_is_revalidated_and_refreshed_by_304(
    edge: EdgeUnderTest, origin: Origin
) -> None:
    """§4.3: a stale entry is revalidated with its validators; §4.3.4: a 304 refreshes the
    stored headers and the stored body is served."""

    async def conditional(request: web.Request) -> web.StreamResponse:
        if request.headers.get("If-None-Match") == '"v1"':
            return web.Response(
                status=304, headers={"ETag": '"v1"', "Cache-Control": "max-age=120", "X-Gen": "2"}
            )
        return web.Response(
            body=b"version one",
            headers={"ETag": '"v1"', "Cache-Control": "max-age=10", "X-Gen": "1"},
        )

    origin.route("/c", conditional)
    await edge.get("/c")
    edge.clock.advance(11)
    response, body = await edge.get("/c")
    assert body == b"version one"
    assert response.headers["Cache-Status"] == "cdn-proxy; fwd=stale; stored"
    assert response.headers["X-Gen"] == "2"
    assert origin.seen[1].headers["If-None-Match"] == '"v1"'
    edge.clock.advance(100)  # fresh for 120 s now, by the 304's Cache-Control
    response, body = await edge.get("/c")
    assert "hit" in response.headers["Cache-Status"]
    assert response.headers["X-Gen"] == "2"
    assert body == b"version one"
    assert origin.count("/c") == 2


async def test_stale_entry_replaced_by_a_full_response(edge: EdgeUnderTest, origin: Origin) -> None:
    versions = iter([(b"one", 5), (b"two", 60)])

    async def changing(request: web.Request) -> web.StreamResponse:
        body, max_age = next(versions)
        return web.Response(
            body=body,
            headers={
                "Last-Modified": formatdate(0, usegmt=True),
                "Cache-Control": f"max-age={max_age}",
            },
        )

    origin.route("/r", changing)
    await edge.get("/r")
    edge.clock.advance(6)
    _, body = await edge.get("/r")
    assert body == b"two"
    assert origin.seen[1].headers["If-Modified-Since"] == formatdate(0, usegmt=True)
    response, body = await edge.get("/r")
    assert body == b"two"
    assert "hit" in response.headers["Cache-Status"]


@pytest.mark.parametrize("cache_control", ["no-cache", "no-cache, max-age=60"])
async def test_no_cache_response_is_revalidated_on_every_use(
    edge: EdgeUnderTest, origin: Origin, cache_control: str
) -> None:
    """§5.2.2.4: no-cache responses are stored but validated before each reuse, even while
    a max-age says they are fresh."""
    fields = {"ETag": '"n"', "Cache-Control": cache_control}

    async def handler(request: web.Request) -> web.StreamResponse:
        if request.headers.get("If-None-Match") == '"n"':
            return web.Response(status=304, headers=fields)
        return web.Response(body=b"checked", headers=fields)

    origin.route("/n", handler)
    for _ in range(3):
        _, body = await edge.get("/n")
        assert body == b"checked"
    assert origin.count("/n") == 3
    assert [s.headers.get("If-None-Match") for s in origin.seen] == [None, '"n"', '"n"']


async def test_client_conditional_request_gets_304_from_a_fresh_entry(
    edge: EdgeUnderTest, origin: Origin
) -> None:
    """RFC 9110 §13.2.2: If-None-Match and If-Modified-Since answered by the cache."""
    modified = formatdate(1_000_000, usegmt=True)
    origin.reply(
        "/cond",
        b"body",
        headers={"ETag": 'W/"abc"', "Last-Modified": modified, "Cache-Control": "max-age=60"},
    )
    await edge.get("/cond")
    response, body = await edge.get("/cond", headers={"If-None-Match": '"xyz", W/"abc"'})
    assert response.status == 304
    assert body == b""
    assert response.headers["ETag"] == 'W/"abc"'
    assert "hit" in response.headers["Cache-Status"]
    response, _ = await edge.get("/cond", headers={"If-Modified-Since": modified})
    assert response.status == 304
    response, body = await edge.get("/cond", headers={"If-None-Match": '"other"'})
    assert response.status == 200
    assert body == b"body"
    assert origin.count("/cond") == 1


async def test_fill_request_drops_client_conditionals(edge: EdgeUnderTest, origin: Origin) -> None:
    """The cache fetches the full response to store it, then answers the condition itself."""
    origin.reply("/f", b"full", headers={"ETag": '"e"', "Cache-Control": "max-age=60"})
    response, _ = await edge.get("/f", headers={"If-None-Match": '"e"'})
    assert "If-None-Match" not in origin.seen[0].headers
    assert response.status == 304


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "PURGE", "PROPFIND"])
async def test_unsafe_methods_go_to_origin_and_invalidate(
    edge: EdgeUnderTest, origin: Origin, method: str
) -> None:
    """§4.4: a non-error answer to an unsafe method invalidates the target URI, and
    Location / Content-Location on the same host."""
    cacheable = {"Cache-Control": "max-age=60"}
    for target in ("/item", "/moved", "/content"):
        origin.reply(target, target.encode(), headers=cacheable)
    for target in ("/item", "/moved", "/content"):
        await edge.get(target)

    async def write(request: web.Request) -> web.StreamResponse:
        return web.Response(
            status=201,
            text="written",
            headers={
                "Location": "http://example.com/moved",
                "Content-Location": "/content",
                "Cache-Control": "max-age=60",
            },
        )

    origin.route("/item", write)
    response, body = await edge.get("/item", method=method, data=b"payload")
    assert response.status == 201
    assert body == b"written"
    assert response.headers["Cache-Status"] == "cdn-proxy; fwd=method"
    assert origin.seen[-1].method == method
    assert origin.seen[-1].body == b"payload"
    for target in ("/item", "/moved", "/content"):
        assert edge.store.held(("example.com", 0, target)) is None, target
    # The unsafe answer itself was not stored for GET.
    origin.reply("/item", b"fresh", headers=cacheable)
    _, body = await edge.get("/item")
    assert body == b"fresh"


async def test_failed_unsafe_request_invalidates_nothing(
    edge: EdgeUnderTest, origin: Origin
) -> None:
    origin.reply("/keep", b"kept", headers={"Cache-Control": "max-age=60"})
    await edge.get("/keep")

    async def refuse(request: web.Request) -> web.StreamResponse:
        return web.Response(status=403, text="no")

    origin.route("/keep", refuse)
    response, _ = await edge.get("/keep", method="DELETE")
    assert response.status == 403
    response, body = await edge.get("/keep")
    assert body == b"kept"
    assert "hit" in response.headers["Cache-Status"]


async def test_other_host_location_is_not_invalidated(edge: EdgeUnderTest, origin: Origin) -> None:
    origin.reply("/there", b"there", headers={"Cache-Control": "max-age=60"})
    await edge.get("/there", host="other.test")
    origin.reply("/post", b"ok", headers={"Location": "http://other.test/there"})
    await edge.get("/post", method="POST")
    response, _ = await edge.get("/there", host="other.test")
    assert "hit" in response.headers["Cache-Status"]


async def test_request_no_cache_revalidates(edge: EdgeUnderTest, origin: Origin) -> None:
    """§5.2.1.4: the client's no-cache makes the cache validate before reuse."""
    origin.reply("/q", b"x", headers={"Cache-Control": "max-age=60", "ETag": '"q"'})
    await edge.get("/q")
    await edge.get("/q", headers={"Cache-Control": "no-cache"})
    assert origin.count("/q") == 2
    assert origin.seen[1].headers["If-None-Match"] == '"q"'


async def test_only_if_cached_never_reaches_the_origin(edge: EdgeUnderTest, origin: Origin) -> None:
    """§5.2.1.7."""
    origin.reply("/o", b"x", headers={"Cache-Control": "max-age=60"})
    response, _ = await edge.get("/o", headers={"Cache-Control": "only-if-cached"})
    assert response.status == 504
    assert origin.seen == []
    await edge.get("/o")
    response, body = await edge.get("/o", headers={"Cache-Control": "only-if-cached"})
    assert response.status == 200
    assert body == b"x"


async def test_get_with_a_body_bypasses_the_cache(edge: EdgeUnderTest, origin: Origin) -> None:
    origin.reply("/fat", b"answer", headers={"Cache-Control": "max-age=60"})
    response, _ = await edge.get("/fat", data=b"q=poison")
    assert response.headers["Cache-Status"] == "cdn-proxy; fwd=bypass"
    response, _ = await edge.get("/fat")
    assert "fwd=uri-miss; stored" in response.headers["Cache-Status"]


async def test_304_that_forbids_storing_is_served_once_and_dropped(
    edge: EdgeUnderTest, origin: Origin
) -> None:
    """§4.3.4: the 304's fields replace the stored ones; with no-store among them the entry
    is served this once with them and then no longer kept."""

    async def handler(request: web.Request) -> web.StreamResponse:
        if request.headers.get("If-None-Match") == '"k"':
            return web.Response(status=304, headers={"ETag": '"k"', "Cache-Control": "no-store"})
        return web.Response(
            body=b"kept body", headers={"ETag": '"k"', "Cache-Control": "max-age=5"}
        )

    origin.route("/k", handler)
    await edge.get("/k")
    edge.clock.advance(6)
    response, body = await edge.get("/k")
    assert body == b"kept body"
    assert response.headers["Cache-Control"] == "no-store"
    assert response.headers["Cache-Status"] == "cdn-proxy; fwd=stale"
    assert edge.store.held(("example.com", 0, "/k")) is None
