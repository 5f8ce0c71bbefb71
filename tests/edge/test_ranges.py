"""Range requests answered from the cache (issue 14 §5, decision 0021), against a real origin
that records what it was asked: RFC 9110 §14 (Range), §13.1.5 (If-Range), §15.3.7 (206),
§15.5.17 (416)."""

from __future__ import annotations

import asyncio
import gzip
import random
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from tests.conftest import EdgeFactory, EdgeUnderTest, Origin
from tests.nodes import Node, write_config
from tests.polling import until

MIB = 1024 * 1024
VIDEO = random.Random(14).randbytes(2 * MIB)  # a 2 MiB object, every byte position distinct
FRESH = {"Cache-Control": "max-age=600", "ETag": '"v1"'}
LAST_MODIFIED = "Tue, 15 Nov 1994 08:12:31 GMT"


def big_cache() -> dict[str, str]:
    """A cache whose objects may be 4 MiB, so the 2 MiB object is stored."""
    return {"max_bytes": "32MiB", "max_object_bytes": "4MiB"}


def ranges_seen(origin: Origin, target: str) -> list[str | None]:
    """The Range of every request the origin got for ``target`` (None: none)."""
    return [seen.headers.get("Range") for seen in origin.seen if seen.target == target]


async def test_one_origin_fetch_answers_a_seeking_player(
    make_edge: EdgeFactory, origin: Origin
) -> None:
    """A video-like seek: the player's first ``bytes=0-`` misses and the whole object is
    fetched once, without the Range (decision 0031); every range after it, and the whole
    object, come from the cache."""
    edge = await make_edge(cache=big_cache())
    origin.reply("/video.mp4", VIDEO, headers={**FRESH, "Content-Type": "video/mp4"})
    seeks = [(0, None), (0, 1), (1_500_000, 1_599_999), (MIB, None), (2 * MIB - 10, None)]
    for first, last in seeks:
        spec = f"bytes={first}-{'' if last is None else last}"
        response, body = await edge.get("/video.mp4", headers={"Range": spec})
        end = len(VIDEO) - 1 if last is None else last
        assert response.status == 206, spec
        assert body == VIDEO[first : end + 1], spec
        assert response.headers["Content-Range"] == f"bytes {first}-{end}/{len(VIDEO)}"
        assert response.headers["Content-Length"] == str(end - first + 1)
        assert response.headers["Content-Type"] == "video/mp4"
        assert response.headers["ETag"] == '"v1"'
        assert response.headers["Accept-Ranges"] == "bytes"
    suffix, body = await edge.get("/video.mp4", headers={"Range": "bytes=-500"})
    assert (suffix.status, body) == (206, VIDEO[-500:])
    whole, body = await edge.get("/video.mp4")
    assert (whole.status, body) == (200, VIDEO)
    assert "Content-Range" not in whole.headers
    assert ranges_seen(origin, "/video.mp4") == [None]


async def test_cache_status_and_age_on_a_206_as_on_a_200(
    edge: EdgeUnderTest, origin: Origin
) -> None:
    origin.reply("/a", b"0123456789", headers=FRESH)
    first, body = await edge.get("/a", headers={"Range": "bytes=0-"})
    assert (first.status, body) == (206, b"0123456789")
    assert first.headers["Cache-Status"] == "cdn-proxy; fwd=uri-miss; stored"
    assert first.headers["Age"] == "0"
    assert first.headers["Via"] == "1.1 cdn-proxy"
    edge.clock.advance(30)
    hit, body = await edge.get("/a", headers={"Range": "bytes=2-4"})
    assert (hit.status, body) == (206, b"234")
    assert hit.headers["Cache-Status"] == "cdn-proxy; hit"
    assert hit.headers["Age"] == "30"
    assert origin.count("/a") == 1


async def test_concurrent_range_misses_collapse_into_one_fetch(
    make_edge: EdgeFactory, origin: Origin
) -> None:
    """Ranges of one URL asked while a fill of it is under way (here a player's
    ``bytes=0-``): they wait on it (edge/flights.py) rather than go to the origin, and each
    client gets its own range from the stored object."""
    edge = await make_edge(cache=big_cache())
    release = asyncio.Event()
    arrived = 0

    async def slow(request: web.Request) -> web.StreamResponse:
        nonlocal arrived
        arrived += 1
        await release.wait()
        return web.Response(body=VIDEO, headers=FRESH)

    origin.route("/v", slow)
    leader = asyncio.create_task(edge.get("/v", headers={"Range": "bytes=0-"}))
    await until(lambda: arrived == 1)
    flight = edge.edge.flights.get(("example.com", 0, "/v"))
    assert flight is not None
    starts = [0, 100, MIB, 2 * MIB - 1, 12345]
    tasks = [
        asyncio.create_task(edge.get("/v", headers={"Range": f"bytes={s}-{s + 99}"}))
        for s in starts
    ]
    await until(lambda: flight.waiters == len(starts))
    release.set()
    for start, (response, body) in zip(starts, await asyncio.gather(*tasks), strict=True):
        assert response.status == 206
        assert body == VIDEO[start : start + 100]
    first, body = await leader
    assert (first.status, body) == (206, VIDEO)
    assert ranges_seen(origin, "/v") == [None]


async def test_if_range_with_an_etag(edge: EdgeUnderTest, origin: Origin) -> None:
    """RFC 9110 §13.1.5: the range when the client's copy is this one (strong match), else
    the whole 200."""
    origin.reply("/e", b"0123456789", headers=FRESH)
    await edge.get("/e")
    match, body = await edge.get("/e", headers={"Range": "bytes=0-3", "If-Range": '"v1"'})
    assert (match.status, body) == (206, b"0123")
    for validator in ('"v0"', 'W/"v1"'):
        other, body = await edge.get("/e", headers={"Range": "bytes=0-3", "If-Range": validator})
        assert (other.status, body) == (200, b"0123456789"), validator
        assert "Content-Range" not in other.headers
    assert origin.count("/e") == 1


async def test_if_range_with_a_date(edge: EdgeUnderTest, origin: Origin) -> None:
    origin.reply(
        "/d",
        b"0123456789",
        headers={"Cache-Control": "max-age=600", "Last-Modified": LAST_MODIFIED},
    )
    await edge.get("/d")
    match, body = await edge.get("/d", headers={"Range": "bytes=-2", "If-Range": LAST_MODIFIED})
    assert (match.status, body) == (206, b"89")
    later = "Tue, 15 Nov 1994 08:12:32 GMT"
    other, body = await edge.get("/d", headers={"Range": "bytes=-2", "If-Range": later})
    assert (other.status, body) == (200, b"0123456789")


async def test_416_when_no_range_is_satisfiable(edge: EdgeUnderTest, origin: Origin) -> None:
    """RFC 9110 §15.5.17: a 416 with ``Content-Range: bytes */LEN``, from the cache."""
    origin.reply("/s", b"0123456789", headers=FRESH)
    await edge.get("/s")
    for spec in ("bytes=10-", "bytes=10-20,30-40", "bytes=-0"):
        response, _ = await edge.get("/s", headers={"Range": spec})
        assert response.status == 416, spec
        assert response.headers["Content-Range"] == "bytes */10"
        assert "cdn-proxy" in response.headers["Cache-Status"]
    assert origin.count("/s") == 1


async def test_ranges_the_cache_ignores_get_the_whole_200(
    edge: EdgeUnderTest, origin: Origin
) -> None:
    """RFC 9110 §14.2: an unknown unit, invalid syntax and (decision 0021) several ranges
    that do not coalesce are ignored; overlapping ones are sent as one range."""
    origin.reply("/i", b"0123456789", headers=FRESH)
    await edge.get("/i")
    for spec in ("items=0-1", "bytes=3-1", "bytes=x", "bytes=0-1,5-6"):
        response, body = await edge.get("/i", headers={"Range": spec})
        assert (response.status, body) == (200, b"0123456789"), spec
    merged, body = await edge.get("/i", headers={"Range": "bytes=0-3,2-5"})
    assert (merged.status, body, merged.headers["Content-Range"]) == (
        206,
        b"012345",
        "bytes 0-5/10",
    )
    assert origin.count("/i") == 1


async def test_range_on_head_and_on_a_stored_error_are_ignored(
    edge: EdgeUnderTest, origin: Origin
) -> None:
    """RFC 9110 §14.2: Range is defined for GET only, and only where the answer would be a
    200: a HEAD gets the 200's fields, a stored 404 is sent whole."""
    origin.reply("/h", b"0123456789", headers=FRESH)
    origin.reply("/missing", b"not here", status=404, headers={"Cache-Control": "max-age=600"})
    await edge.get("/h")
    await edge.get("/missing")
    head, body = await edge.get("/h", method="HEAD", headers={"Range": "bytes=0-1"})
    assert (head.status, body) == (200, b"")
    assert "Content-Range" not in head.headers
    for _ in range(2):
        missing, body = await edge.get("/missing", headers={"Range": "bytes=0-1"})
        assert (missing.status, body) == (404, b"not here")
    assert origin.count("/missing") == 1
    assert origin.count("/h") == 1


async def test_a_304_to_the_clients_condition_comes_before_the_range(
    edge: EdgeUnderTest, origin: Origin
) -> None:
    """RFC 9110 §14.2: Range is ignored when a conditional GET results in a 304."""
    origin.reply("/c", b"0123456789", headers=FRESH)
    await edge.get("/c")
    response, _ = await edge.get("/c", headers={"Range": "bytes=0-1", "If-None-Match": '"v1"'})
    assert response.status == 304


async def test_ranges_of_an_encoded_response_address_the_encoded_bytes(
    edge: EdgeUnderTest, origin: Origin
) -> None:
    """RFC 9110 §14.1: the range is of the representation as sent, content coding included."""
    encoded = gzip.compress(b"hello " * 1000)
    origin.reply(
        "/z",
        encoded,
        headers={**FRESH, "Content-Encoding": "gzip", "Vary": "Accept-Encoding"},
    )
    asked = {"Accept-Encoding": "gzip"}
    await edge.get("/z", headers=asked)
    response, body = await edge.get("/z", headers={**asked, "Range": "bytes=0-9"})
    assert (response.status, body) == (206, encoded[:10])
    assert response.headers["Content-Encoding"] == "gzip"
    assert response.headers["Content-Range"] == f"bytes 0-9/{len(encoded)}"
    assert origin.count("/z") == 1


async def test_a_stale_while_revalidate_hit_answers_the_range(
    edge: EdgeUnderTest, origin: Origin
) -> None:
    origin.reply(
        "/w", b"0123456789", headers={"Cache-Control": "max-age=10, stale-while-revalidate=60"}
    )
    await edge.get("/w")
    edge.clock.advance(20)
    response, body = await edge.get("/w", headers={"Range": "bytes=5-"})
    assert (response.status, body) == (206, b"56789")
    assert response.headers["Cache-Status"] == 'cdn-proxy; hit; detail="stale-while-revalidate"'
    assert response.headers["Age"] == "20"
    await until(lambda: origin.count("/w") == 2)  # revalidated in the background


async def test_a_background_revalidation_not_stored_is_dropped_whole(
    edge: EdgeUnderTest, origin: Origin
) -> None:
    """RFC 5861 §3: the revalidation behind a stale-while-revalidate hit is answered with a
    200 that may not be stored: the stale entry goes, the answer is dropped unread, and no
    Range of the client's reaches the origin on its account."""
    swr = {"Cache-Control": "max-age=10, stale-while-revalidate=60"}
    origin.reply("/n", b"0123456789", headers=swr)
    await edge.get("/n")
    edge.clock.advance(20)
    origin.reply("/n", b"abcdefghij", headers={"Cache-Control": "no-store"})
    response, body = await edge.get("/n", headers={"Range": "bytes=5-"})
    assert (response.status, body) == (206, b"56789")
    # Revalidated in the background, and the stale entry dropped.
    await until(lambda: edge.store.peek("example.com", "/n") is None)
    response, body = await edge.get("/n")
    assert (response.status, body) == (200, b"abcdefghij")
    assert response.headers["Cache-Status"] == 'cdn-proxy; fwd=uri-miss; detail="no-store"'
    assert ranges_seen(origin, "/n") == [None, None, None]


async def test_a_revalidated_entry_answers_the_range(edge: EdgeUnderTest, origin: Origin) -> None:
    """A stale entry revalidated with a 304 (RFC 9111 §4.3.4): the range is cut from the
    stored body under the refreshed fields; the origin never sees the Range."""

    async def validated(request: web.Request) -> web.StreamResponse:
        if request.headers.get("If-None-Match") == '"v1"':
            return web.Response(status=304, headers={"Cache-Control": "max-age=10", "ETag": '"v1"'})
        return web.Response(
            body=b"0123456789", headers={"Cache-Control": "max-age=10", "ETag": '"v1"'}
        )

    origin.route("/r", validated)
    await edge.get("/r")
    edge.clock.advance(20)
    response, body = await edge.get("/r", headers={"Range": "bytes=0-0"})
    assert (response.status, body) == (206, b"0")
    assert response.headers["Cache-Status"] == "cdn-proxy; fwd=stale; stored"
    assert ranges_seen(origin, "/r") == [None, None]
    assert [s.headers.get("If-None-Match") for s in origin.seen] == [None, '"v1"']


async def test_a_response_that_is_not_stored_answers_bytes_0_and_passes_other_ranges(
    edge: EdgeUnderTest, origin: Origin
) -> None:
    """A private 200 within max_object_bytes: ``bytes=0-`` is cut from the whole 200, and
    nothing is kept; a range of part of it goes to the origin as it is (decision 0031)."""

    async def handler(request: web.Request) -> web.StreamResponse:
        return await ranged_origin(request, b"0123456789", chunked=False, cache="private")

    origin.route("/p", handler)
    for _ in range(2):
        response, body = await edge.get("/p", headers={"Range": "bytes=0-"})
        assert (response.status, body) == (206, b"0123456789")
        assert response.headers["Cache-Status"] == 'cdn-proxy; fwd=uri-miss; detail="private"'
        response, body = await edge.get("/p", headers={"Range": "bytes=1-2"})
        assert (response.status, body) == (206, b"12")
        assert response.headers["Content-Range"] == "bytes 1-2/10"
        assert response.headers["Cache-Status"] == 'cdn-proxy; fwd=uri-miss; detail="range"'
    assert ranges_seen(origin, "/p") == [None, "bytes=1-2", None, "bytes=1-2"]


async def test_a_partial_answer_to_the_fill_is_passed_on(
    edge: EdgeUnderTest, origin: Origin
) -> None:
    """An origin that sends a 206 although the fill asked for the whole object: passed on as it
    is, never stored (RFC 9111 §3.3 allows, never requires, storing partial content)."""
    headers = {**FRESH, "Content-Range": "bytes 0-4/10"}
    origin.reply("/odd", b"01234", status=206, headers=headers)
    for _ in range(2):
        response, body = await edge.get("/odd", headers={"Range": "bytes=0-"})
        assert (response.status, body) == (206, b"01234")
    assert origin.count("/odd") == 2


# -- objects larger than cache.max_object_bytes (1 MiB in these tests) -------------------------


async def ranged_origin(
    request: web.Request, body: bytes, *, chunked: bool, cache: str = "max-age=600"
) -> web.StreamResponse:
    """An origin with its own single-range support; whole answers with a Content-Length, or
    chunked (no length known in advance)."""
    fresh = {**FRESH, "Cache-Control": cache}
    spec = request.headers.get("Range")
    if spec is not None:
        first, _, last = spec.removeprefix("bytes=").partition("-")
        if first:
            start, end = int(first), int(last) if last else len(body) - 1
        else:
            start, end = len(body) - int(last), len(body) - 1
        return web.Response(
            status=206,
            body=body[start : end + 1],
            headers={"Content-Range": f"bytes {start}-{end}/{len(body)}", **fresh},
        )
    response = web.StreamResponse(headers=fresh)
    if chunked:
        response.enable_chunked_encoding()
    else:
        response.content_length = len(body)
    await response.prepare(request)
    try:
        for offset in range(0, len(body), 64 * 1024):
            await response.write(body[offset : offset + 64 * 1024])
    except ConnectionError:
        return response  # the edge let go of the whole object: expected
    await response.write_eof()
    return response


async def test_a_range_of_part_of_an_object_goes_to_the_origin_as_it_is(
    edge: EdgeUnderTest, origin: Origin
) -> None:
    """A miss for a range of part of an object: the client's Range is passed on and the
    origin's 206 relayed, never stored, whatever the object's size (decision 0031)."""

    async def handler(request: web.Request) -> web.StreamResponse:
        return await ranged_origin(request, VIDEO, chunked=False)

    origin.route("/big", handler)
    for _ in range(2):
        response, body = await edge.get("/big", headers={"Range": "bytes=1000-1999"})
        assert (response.status, body) == (206, VIDEO[1000:2000])
        assert response.headers["Content-Range"] == f"bytes 1000-1999/{len(VIDEO)}"
        assert response.headers["Cache-Status"] == 'cdn-proxy; fwd=uri-miss; detail="range"'
    assert ranges_seen(origin, "/big") == ["bytes=1000-1999"] * 2


@pytest.mark.parametrize("chunked", [False, True])
async def test_too_large_bytes_0_is_relayed_whole(
    edge: EdgeUnderTest, origin: Origin, chunked: bool
) -> None:
    """``bytes=0-`` of an object over max_object_bytes (by its Content-Length, or by what
    arrived of a chunked one): the whole object is what the client asked for; it is relayed
    as the 200 it is, from the one origin request (RFC 9110 §14.2 lets a server ignore a
    Range), never asked for twice."""

    async def handler(request: web.Request) -> web.StreamResponse:
        return await ranged_origin(request, VIDEO, chunked=chunked)

    origin.route("/stream", handler)
    response, body = await edge.get("/stream", headers={"Range": "bytes=0-"})
    assert (response.status, body) == (200, VIDEO)
    assert response.headers["Cache-Status"] == 'cdn-proxy; fwd=uri-miss; detail="too-large"'
    assert ranges_seen(origin, "/stream") == [None]


async def test_a_stale_entry_too_large_now_gets_the_range_from_the_origin(
    edge: EdgeUnderTest, origin: Origin
) -> None:
    """Revalidating a stale entry with a range: the origin's new 200 is over
    max_object_bytes, so it is let go at its headers, the range asked of the origin, and the
    stale entry, replaced, dropped."""
    origin.reply("/grown", b"0123456789", headers={"Cache-Control": "max-age=10"})
    await edge.get("/grown")
    edge.clock.advance(20)

    async def handler(request: web.Request) -> web.StreamResponse:
        return await ranged_origin(request, VIDEO, chunked=False)

    origin.route("/grown", handler)
    response, body = await edge.get("/grown", headers={"Range": "bytes=-100"})
    assert (response.status, body) == (206, VIDEO[-100:])
    assert response.headers["Cache-Status"] == 'cdn-proxy; fwd=stale; detail="too-large"'
    assert ranges_seen(origin, "/grown") == [None, None, "bytes=-100"]
    # The new 200 replaced the stored one: the old copy is gone, and the next range is a
    # miss forwarded as it is, not another whole-object revalidation.
    response, body = await edge.get("/grown", headers={"Range": "bytes=-100"})
    assert (response.status, body) == (206, VIDEO[-100:])
    assert response.headers["Cache-Status"] == 'cdn-proxy; fwd=uri-miss; detail="range"'
    assert ranges_seen(origin, "/grown") == [None, None, "bytes=-100", "bytes=-100"]


async def test_a_range_of_a_stale_entry_when_the_origin_fails(
    make_edge: EdgeFactory, origin: Origin
) -> None:
    """stale-if-error (RFC 5861 §4): the stale copy answers the range instead of the 500."""
    edge = await make_edge()
    origin.reply("/f", b"0123456789", headers={"Cache-Control": "max-age=10, stale-if-error=600"})
    await edge.get("/f")
    origin.reply("/f", b"broken", status=500)
    edge.clock.advance(60)
    response, body = await edge.get("/f", headers={"Range": "bytes=8-"})
    assert (response.status, body) == (206, b"89")
    assert response.headers["Cache-Status"] == 'cdn-proxy; fwd=stale; detail="stale-if-error"'


# -- the node as an operator runs it -------------------------------------------------------------


@pytest.mark.slow
async def test_a_running_node_seeks_in_a_cached_video_while_the_origin_is_down(
    tmp_path: Path, aiohttp_server: Callable[..., Awaitable[TestServer]]
) -> None:
    """Issue 14's "done when" 4, against ``python -m proxy serve``: fill, stop the origin,
    and ``curl -r 0-99`` still gets the right 100 bytes with a 206, from a fresh entry and
    from a stale one within the domain's stale_if_error."""
    asked: list[tuple[str, str | None]] = []

    async def handle(request: web.Request) -> web.StreamResponse:
        asked.append((request.path, request.headers.get("Range")))
        if request.path == "/stale.mp4":  # stale at once, kept for its validator
            return web.Response(body=VIDEO, headers={"Cache-Control": "max-age=0", "ETag": '"s"'})
        return web.Response(body=VIDEO, headers={**FRESH, "Content-Type": "video/mp4"})

    app = web.Application()
    app.router.add_get("/{name}", handle)
    server = await aiohttp_server(app)
    origin_url = str(server.make_url("")).rstrip("/")
    node = await Node.start(write_config(tmp_path, origin_url, extra="stale_if_error = 60"))
    try:
        async with aiohttp.ClientSession(auto_decompress=False) as client:

            async def get(path: str, spec: str | None) -> tuple[int, dict[str, str], bytes]:
                headers = {"Host": "example.com", **({"Range": spec} if spec else {})}
                async with client.get(node.edge + path, headers=headers) as response:
                    return response.status, dict(response.headers), await response.read()

            for path in ("/video.mp4", "/stale.mp4"):
                status, _, body = await get(path, "bytes=0-")  # the fill
                assert (status, body) == (206, VIDEO)
            await server.close()
            for path in ("/video.mp4", "/stale.mp4"):
                status, headers, body = await get(path, "bytes=0-99")
                assert (status, body) == (206, VIDEO[:100]), path
                assert headers["Content-Range"] == f"bytes 0-99/{len(VIDEO)}"
                status, _, body = await get(path, f"bytes={MIB}-{MIB + 4095}")
                assert (status, body) == (206, VIDEO[MIB : MIB + 4096]), path
            _, headers, _ = await get("/stale.mp4", "bytes=0-99")
            assert headers["Cache-Status"] == 'cdn-proxy; fwd=stale; detail="stale-if-error"'
    finally:
        await node.kill()
    assert asked == [("/video.mp4", None), ("/stale.mp4", None)]


async def test_a_range_waiting_on_a_fill_that_cannot_be_shared_goes_to_the_origin_as_it_is(
    edge: EdgeUnderTest, origin: Origin
) -> None:
    """A range that joined a fill under way, whose answer turns out not to be shareable
    (no-store): it asks the origin for its range, never for the whole object (decision
    0031)."""
    release = asyncio.Event()
    body = bytes(range(100))

    async def slow(request: web.Request) -> web.StreamResponse:
        if "Range" not in request.headers:
            await release.wait()
        return await ranged_origin(request, body, chunked=False, cache="no-store")

    origin.route("/n", slow)
    leader = asyncio.create_task(edge.get("/n"))
    await until(lambda: origin.count("/n") == 1)
    flight = edge.edge.flights.get(("example.com", 0, "/n"))
    assert flight is not None
    waiter = asyncio.create_task(edge.get("/n", headers={"Range": "bytes=10-19"}))
    await until(lambda: flight.waiters == 1)
    release.set()
    whole, received = await leader
    assert (whole.status, received) == (200, body)
    ranged, received = await waiter
    assert (ranged.status, received) == (206, body[10:20])
    assert ranged.headers["Cache-Status"] == 'cdn-proxy; fwd=uri-miss; detail="range"'
    assert ranges_seen(origin, "/n") == [None, "bytes=10-19"]
