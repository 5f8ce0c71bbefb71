"""Purges by URL, prefix, tag and all, hard and soft, through the edge with a real origin
whose version counter shows what every answer was made from (decision 0024). The test calls
the store's purge itself (the API for it comes later in issue 15)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest
from aiohttp import web

from proxy.core.purge.purges import MAX_TAGS, Purge, purge_request
from tests.conftest import EdgeFactory, EdgeUnderTest, Origin
from tests.polling import until

TAGS = {"/assets/a.css": "assets", "/assets/b.js": "assets", "/page": "page p-1"}
URLS = ["/assets/a.css", "/assets/b.js", "/page", "/other"]


@dataclass
class Versioned:
    """An origin whose every answer carries the current version; it answers a conditional
    request for the current version with 304, and counts full answers and 304s."""

    version: int = 1
    full: dict[str, int] = field(default_factory=dict)
    not_modified: dict[str, int] = field(default_factory=dict)

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        path = request.raw_path
        etag = f'"v{self.version}"'
        headers = {"Cache-Control": "max-age=60", "ETag": etag}
        if path in TAGS:
            headers["Surrogate-Key"] = TAGS[path]
            headers["Cache-Tag"] = "all-tagged"
        if request.headers.get("If-None-Match") == etag:
            self.not_modified[path] = self.not_modified.get(path, 0) + 1
            return web.Response(status=304, headers=headers)
        self.full[path] = self.full.get(path, 0) + 1
        return web.Response(body=f"{path} v{self.version}".encode(), headers=headers)


@pytest.fixture
async def versioned(edge: EdgeUnderTest, origin: Origin) -> Versioned:
    """The edge with every URL cached at version 1, and each second request a hit."""
    counter = Versioned()
    origin.default = counter
    for url in URLS:
        await edge.get(url)
        response, body = await edge.get(url)
        assert response.headers["Cache-Status"] == "cdn-proxy; hit", url
        assert body == f"{url} v1".encode()
    return counter


KINDS = [
    (purge_request("url", ["/page"]), {"/page"}),
    (purge_request("prefix", ["/assets/"]), {"/assets/a.css", "/assets/b.js"}),
    (purge_request("tag", ["p-1"]), {"/page"}),
    (purge_request("tag", ["all-tagged"]), {"/assets/a.css", "/assets/b.js", "/page"}),
    (purge_request("all"), set(URLS)),
]
IDS = ["url", "prefix", "surrogate-key", "cache-tag", "all"]


@pytest.mark.parametrize("soft", [False, True], ids=["hard", "soft"])
@pytest.mark.parametrize(("purge", "covered"), KINDS, ids=IDS)
async def test_after_a_purge_no_request_gets_pre_purge_content(
    edge: EdgeUnderTest, versioned: Versioned, purge: Purge, covered: set[str], soft: bool
) -> None:
    """The origin moves to version 2, then the purge: every covered URL answers version 2
    (hard: a miss; soft: a revalidation the old ETag no longer matches), on the first request
    and after; every URL it does not cover is still a hit."""
    versioned.version = 2
    result = await edge.store.purge("example.com", Purge(purge.kind, purge.items, soft=soft))
    assert result.soft is soft
    for _ in range(2):
        for url in URLS:
            response, body = await edge.get(url)
            if url in covered:
                assert body == f"{url} v2".encode(), url
            else:
                assert body == f"{url} v1".encode(), url
                assert response.headers["Cache-Status"] == "cdn-proxy; hit", url
    for url in covered:
        assert versioned.full[url] == 2  # one fetch after the purge, then hits
        response, _ = await edge.get(url)
        assert response.headers["Cache-Status"] == "cdn-proxy; hit"


@pytest.mark.parametrize(("purge", "covered"), KINDS, ids=IDS)
async def test_a_soft_purge_revalidates_and_a_304_refreshes(
    edge: EdgeUnderTest, versioned: Versioned, purge: Purge, covered: set[str]
) -> None:
    """Content unchanged at the origin: after a soft purge each covered URL costs the origin a
    304, not a full answer, and is a hit again after it."""
    await edge.store.purge("example.com", Purge(purge.kind, purge.items, soft=True))
    for url in URLS:
        response, body = await edge.get(url)
        assert body == f"{url} v1".encode()
        if url in covered:
            assert response.headers["Cache-Status"] == "cdn-proxy; fwd=stale; stored"
        response, _ = await edge.get(url)
        assert response.headers["Cache-Status"] == "cdn-proxy; hit"
    assert versioned.full == dict.fromkeys(URLS, 1)
    assert versioned.not_modified == dict.fromkeys(covered, 1)


@pytest.mark.parametrize(("purge", "covered"), KINDS, ids=IDS)
async def test_a_dry_run_changes_nothing(
    edge: EdgeUnderTest, versioned: Versioned, purge: Purge, covered: set[str]
) -> None:
    versioned.version = 2
    dry = Purge(purge.kind, purge.items, dry_run=True)
    result = await edge.store.purge("example.com", dry)
    assert set(result.sample) == covered
    assert result.entries == len(covered)
    for url in URLS:
        response, body = await edge.get(url)
        assert response.headers["Cache-Status"] == "cdn-proxy; hit"
        assert body == f"{url} v1".encode()
    assert versioned.full == dict.fromkeys(URLS, 1)


async def test_tag_fields_never_reach_clients(edge: EdgeUnderTest, origin: Origin) -> None:
    tagged = {"Cache-Control": "max-age=60", "Surrogate-Key": "a b", "Cache-Tag": "c"}
    origin.reply("/stored", headers=tagged)
    origin.reply("/relayed", headers={**tagged, "Cache-Control": "no-store"})
    for url in ["/stored", "/stored", "/relayed"]:  # a miss, a hit, a relay
        response, _ = await edge.get(url)
        assert "Surrogate-Key" not in response.headers
        assert "Cache-Tag" not in response.headers
    response, _ = await edge.get("/stored", headers={"Cache-Control": "max-age=0"})
    assert "Surrogate-Key" not in response.headers  # the full path's answer too


async def test_too_many_tags_are_served_but_not_stored(edge: EdgeUnderTest, origin: Origin) -> None:
    many = " ".join(f"t{i}" for i in range(MAX_TAGS + 1))
    origin.reply("/many", headers={"Cache-Control": "max-age=60", "Surrogate-Key": many})
    for _ in range(2):
        response, body = await edge.get("/many")
        assert body == b"hello"
        assert (
            response.headers["Cache-Status"] == 'cdn-proxy; fwd=uri-miss; detail="tags-over-limit"'
        )
    assert origin.count("/many") == 2


async def test_a_domain_reads_only_the_tag_fields_it_names(
    make_edge: EdgeFactory, origin: Origin
) -> None:
    edge = await make_edge(
        domains=[{"name": "example.com", "origin": origin.url, "tag_headers": ["Cache-Tag"]}]
    )
    origin.reply(
        "/x", headers={"Cache-Control": "max-age=60", "Surrogate-Key": "s", "Cache-Tag": "c"}
    )
    response, _ = await edge.get("/x")
    assert response.headers["Surrogate-Key"] == "s"  # not a tag here: an ordinary field
    assert "Cache-Tag" not in response.headers
    await edge.store.purge("example.com", purge_request("tag", ["s"]))
    response, _ = await edge.get("/x")
    assert response.headers["Cache-Status"] == "cdn-proxy; hit"
    await edge.store.purge("example.com", purge_request("tag", ["c"]))
    response, _ = await edge.get("/x")
    assert response.headers["Cache-Status"] == "cdn-proxy; fwd=uri-miss; stored"


@pytest.mark.parametrize(
    "purge",
    [
        purge_request("url", ["/race"]),
        purge_request("prefix", ["/ra"]),
        purge_request("tag", ["race"]),
        purge_request("all", soft=True),
    ],
    ids=["url", "prefix", "tag", "soft-all"],
)
async def test_a_fill_racing_a_purge_is_never_stored_or_shared(
    edge: EdgeUnderTest, origin: Origin, purge: Purge
) -> None:
    """A request at the origin when the purge lands: its answer (pre-purge) is not stored,
    and a request made after the purge does not wait on it but asks the origin itself."""
    arrived = 0
    release = asyncio.Event()

    async def gated(request: web.Request) -> web.StreamResponse:
        nonlocal arrived
        arrived += 1
        number = arrived
        if number == 1:
            await release.wait()
        headers = {"Cache-Control": "max-age=60", "Surrogate-Key": "race"}
        return web.Response(body=f"version {number}".encode(), headers=headers)

    origin.route("/race", gated)
    before = asyncio.create_task(edge.get("/race"))
    await until(lambda: arrived == 1)
    await edge.store.purge("example.com", purge)
    after_response, after_body = await edge.get("/race")  # not collapsed onto the old fill
    assert after_body == b"version 2"
    assert after_response.headers["Cache-Status"] == "cdn-proxy; fwd=uri-miss; stored"
    release.set()
    before_response, before_body = await before
    assert before_body == b"version 1"
    assert before_response.headers["Cache-Status"] == "cdn-proxy; fwd=uri-miss"  # not stored
    response, body = await edge.get("/race")
    assert (body, response.headers["Cache-Status"]) == (b"version 2", "cdn-proxy; hit")
