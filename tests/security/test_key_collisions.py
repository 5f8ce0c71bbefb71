"""Cache-key collisions across domains, and path-normalisation discrepancies.

Two requests may share a cache entry only if the origin would see them as the same request.
The origin here answers with exactly what it received (request-target and Host), so any
entry served for a request the origin would have told apart shows up in the body.
"""

from __future__ import annotations

import pytest
from aiohttp import web

from tests.conftest import EdgeUnderTest
from tests.security.conftest import Site
from tests.security.support import CACHEABLE


async def mirror(request: web.Request) -> web.StreamResponse:
    return web.Response(
        text=f"{request.headers['Host']} {request.raw_path}", headers={"Cache-Control": CACHEABLE}
    )


async def test_domains_never_share_an_entry(edge: EdgeUnderTest, origin: Site) -> None:
    origin.default = mirror
    await edge.get("/shared", host="example.com")
    response, body = await edge.get("/shared", host="other.test")
    assert body == b"other.test /shared"
    assert "hit" not in response.headers["Cache-Status"]
    response, body = await edge.get("/shared", host="example.com")
    assert body == b"example.com /shared"
    assert "hit" in response.headers["Cache-Status"]


@pytest.mark.parametrize(
    ("first_host", "first", "second_host", "second"),
    [
        # Would collide if the key were the joined string host + target.
        ("example.com", "/x", "other.test", "/x"),
        ("other.test", "/example.com/x", "example.com", "/x"),
        ("example.com", "//other.test/x", "other.test", "/x"),
        ("example.com", "/x?host=other.test", "other.test", "/x"),
    ],
)
async def test_no_spelling_of_target_reaches_another_domain_s_entry(
    edge: EdgeUnderTest,
    origin: Site,
    first_host: str,
    first: str,
    second_host: str,
    second: str,
) -> None:
    origin.default = mirror
    await edge.get(first, host=first_host)
    _, body = await edge.get(second, host=second_host)
    assert body == f"{second_host} {second}".encode()


# Pairs an origin can tell apart (it sees different request-targets), and that a cache which
# decodes, folds case or resolves dot segments in its key would merge.
DISTINCT = [
    ("/a/b", "/a%2fb"),
    ("/a/b", "/a%2Fb"),
    ("/a%2fb", "/a%2Fb"),
    ("/a", "/%61"),
    ("/A", "/a"),
    ("/a/b", "/a/./b"),
    ("/b", "/a/../b"),
    ("/b", "/a/%2e%2e/b"),
    ("/a/b", "/a//b"),
    ("/a", "/a/"),
    ("/a", "/a;"),
    ("/a", "/a%3b"),
    ("/a?x=1", "/a?X=1"),
    ("/a?x=1&y=2", "/a?y=2&x=1"),
    ("/a?x=c", "/a?x=%63"),
    ("/a", "/a%20"),
    ("/a", "/a%00"),
    ("/account", "/account%0a"),
    ("/static/../account", "/account"),
]


@pytest.mark.parametrize(("first", "second"), DISTINCT + [(b, a) for a, b in DISTINCT])
async def test_targets_the_origin_tells_apart_are_never_merged(
    edge: EdgeUnderTest, origin: Site, first: str, second: str
) -> None:
    origin.default = mirror
    _, body = await edge.get(first)
    assert body == f"example.com {first}".encode()
    _, body = await edge.get(second)
    assert body == f"example.com {second}".encode()
    assert [seen.target for seen in origin.seen] == [first, second]


@pytest.mark.slow
@pytest.mark.parametrize("host", ["example.com.", "EXAMPLE.com", "example.com:8080"])
async def test_host_spellings_merge_only_because_the_origin_sees_one_host(
    edge: EdgeUnderTest, origin: Site, host: str
) -> None:
    """Trailing dot, case and port are one domain; the origin is always sent its normal
    name, so it cannot tell the two requests apart and sharing the entry is safe."""
    origin.default = mirror
    await edge.get("/t", host=host)
    response, body = await edge.get("/t")
    assert body == b"example.com /t"
    assert "hit" in response.headers["Cache-Status"]
    assert [seen.headers["Host"] for seen in origin.seen] == ["example.com"]
