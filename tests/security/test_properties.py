"""Properties, with hypothesis:

1. Cache-key normalisation: two requests share a cache entry only if the origin cannot tell
   them apart. Pairs of targets (many of them one normalisation step apart: decoded, case
   folded, dot segments resolved, parameters reordered) and Host spellings go through the
   edge; whenever the second is a hit, the origin's view of the second request, asked for on
   an empty cache, must equal its view of the first.
2. The clear-cache API on the real service, spoken to in raw bytes (the existing
   tests/api/test_clear_cache_fuzz.py drives the app with aiohttp's client): any
   Authorization bytes, framing and body get 200 or a 4xx, never a 5xx; a token scoped to
   other.test never clears anything else; a 200 clears exactly the domain named.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest
from aiohttp import web
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from proxy.core.auth.tokens import Scope
from proxy.core.domains import InvalidDomain, normalise_domain
from proxy.process.service import Service, running
from tests.conftest import EdgeUnderTest, make_config
from tests.security.conftest import Site
from tests.security.support import CACHEABLE, RawResponse, exchange, split_url

PROPERTY = settings(
    max_examples=150,
    deadline=None,
    # One edge and one service for all examples on purpose: each example starts from an
    # emptied cache or checks only what it changed.
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)

# -- 1. cache keys -------------------------------------------------------------------------

SEGMENT_PIECES = [
    "a", "A", "%61", "%41", "b", "~", "%7e", "%7E", "-", "_", "%5f", "+", "%2b", "%20",
    ".", "..", "%2e", "%2E", "%2e%2e", "/", "//", "%2f", "%2F", ";", "%3b", "%3B", ";x=1",
    "%00", "%0a", "%25", "%", "x.css", "%3f", "%23",
]  # fmt: skip
QUERY_PIECES = [
    "x", "X", "=", "&", ";", "%26", "%3d", "%3D", "utm_source=1", "&utm_content=x;callback=b",
    "callback=a", "a=1", "a=2",
    "%", "?", "+", "%20", "",
]  # fmt: skip
HOSTS = ["example.com", "EXAMPLE.COM", "example.com.", "Example.Com:8080", "example.com:80"]

paths = st.lists(st.sampled_from(SEGMENT_PIECES), max_size=6).map(lambda p: "/" + "".join(p))
queries = st.none() | st.lists(st.sampled_from(QUERY_PIECES), max_size=5).map("".join)
targets = st.builds(lambda p, q: p if q is None else f"{p}?{q}", paths, queries)


def _dot_segments(target: str) -> str:
    path, mark, query = target.partition("?")
    out: list[str] = []
    for segment in path.split("/")[1:]:
        if segment == "..":
            if out:
                out.pop()
        elif segment != ".":
            out.append(segment)
    return "/" + "/".join(out) + mark + query


# Normalisations a cache might wrongly apply to its key, each turning a target into another
# the origin can tell apart (or, now and then, the same one).
NEAR: list[Callable[[str], str]] = [
    unquote,
    str.lower,
    str.upper,
    _dot_segments,
    lambda t: re.sub("/+", "/", t),
    lambda t: re.sub("%[0-9a-fA-F]{2}", lambda m: m.group(0).lower(), t),
    lambda t: t.partition("?")[0],
    lambda t: t.partition(";")[0],
    lambda t: t.rstrip("/") or "/",
    lambda t: re.sub(r"[?&]utm_[^&]*", "", t),
    lambda t: t.replace(";", "&"),
    lambda t: t.partition("?")[0] + "?" + "&".join(sorted(t.partition("?")[2].split("&"))),
]


@st.composite
def target_pairs(draw: st.DrawFn) -> tuple[str, str]:
    first = draw(targets)
    near = draw(st.integers(0, 3)) < 3  # mostly one normalisation step away
    second = draw(st.sampled_from(NEAR))(first) if near else draw(targets)
    if not second.startswith("/"):
        second = "/" + second
    return first, second


async def mirror(request: web.Request) -> web.StreamResponse:
    return web.Response(
        text=f"{request.method} {request.headers['Host']} {request.raw_path}",
        headers={"Cache-Control": CACHEABLE},
    )


async def send(edge: EdgeUnderTest, target: str, host: str) -> RawResponse:
    """One GET, its request line exactly as given (targets a normalisation decoded may hold
    spaces, control characters or non-ASCII bytes that no HTTP client library would send)."""
    request = b"GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % (
        target.encode(),
        host.encode(),
    )
    [response] = (await exchange(edge.url, request)).responses
    return response


async def origin_view(edge: EdgeUnderTest, origin: Site, target: str, host: str) -> str | None:
    """What the origin receives for this request, asked on an empty cache (None: the edge
    refuses the request, and nothing reaches the origin)."""
    await edge.store.clear_domain("example.com")
    before = len(origin.seen)
    response = await send(edge, target, host)
    if response.status == 400 and response.header("Cache-Status") is None:
        assert len(origin.seen) == before
        return None
    [seen] = origin.seen[before:]
    view = f"{seen.method} {seen.headers['Host']} {seen.target}"
    assert response.body == view.encode()
    return view


# Pairs one known mistake apart, always run besides the generated ones.
KNOWN_PAIRS = [
    ("/a?utm_source=1", "/a"),
    ("/a?utm_content=x;callback=b", "/a"),
    ("/a;x=1", "/a"),
    ("/%61", "/a"),
    ("/A", "/a"),
    ("/a%2fb", "/a/b"),
    ("/a/./b", "/a/b"),
    ("/b/../a", "/a"),
    ("/a//b", "/a/b"),
    ("/a?a=1&a=2", "/a?a=2&a=1"),
]


def with_known_pairs(
    test: Callable[..., Coroutine[Any, Any, None]],
) -> Callable[..., Coroutine[Any, Any, None]]:
    for first, second in KNOWN_PAIRS:
        test = example(pair=(first, second), hosts=("EXAMPLE.com.", "example.com"))(test)
    return test


@pytest.mark.slow
@PROPERTY
@given(pair=target_pairs(), hosts=st.tuples(st.sampled_from(HOSTS), st.sampled_from(HOSTS)))
@with_known_pairs
async def test_requests_share_an_entry_only_if_the_origin_cannot_tell_them_apart(
    edge: EdgeUnderTest, origin: Site, pair: tuple[str, str], hosts: tuple[str, str]
) -> None:
    origin.default = mirror
    origin.seen.clear()  # keeps a failing example's report short
    (first, second), (first_host, second_host) = pair, hosts
    first_view = await origin_view(edge, origin, first, first_host)
    assert first_view is not None  # every generated target is a valid one

    before = len(origin.seen)
    response = await send(edge, second, second_host)
    status = response.header("Cache-Status")
    if status is None:
        event("second target refused")  # not a valid request-target: shares nothing
        assert response.status == 400
        assert len(origin.seen) == before
    elif len(origin.seen) == before:
        event("shared an entry")  # served from the entry the first request filled
        assert "hit" in status
        assert await origin_view(edge, origin, second, second_host) == first_view
        assert response.body == first_view.encode()
    else:
        event("kept apart")
        [seen] = origin.seen[before:]
        assert response.body == f"{seen.method} {seen.headers['Host']} {seen.target}".encode()


# -- 2. the clear-cache API, raw -----------------------------------------------------------

OTHER = "other.test"
IDN = "xn--bcher-kva.example"  # bücher.example
DOMAINS = ("example.com", OTHER, IDN)


@pytest.fixture
async def api_service(tmp_path: Path, origin: Site) -> AsyncIterator[Service]:
    config = make_config(
        tmp_path,
        origin.url,
        # A larger body limit than the default 4 KiB, so nesting can pass any recursion
        # limit (hypothesis raises Python's while it runs a test).
        api={
            "listen": "127.0.0.1:0",
            "auth_failures_allowed": 1_000_000_000,
            "max_body_bytes": 65536,
        },
        domains=[{"name": name, "origin": origin.url} for name in DOMAINS],
    )
    async with running(config) as service:
        yield service


# Spellings around the configured names: the same domain in another form, look-alikes that
# are other domains, and junk a parser could split or truncate differently.
NEAR_DOMAINS = [
    "other.test", "OTHER.TEST", "other.test.", "other\u3002test", "other\uff0etest",
    "oth\u00ader.test", "oth\u0435r.test", "other.test\u0000", "other.test ", "other.test:80",
    "other.test/x",
    "other.test,example.com", "other.test\nexample.com", "*.other.test", "x.other.test",
    "example.com", "EXAMPLE.com.", "example\u3002com", "exa\u200dmple.com", "\u0435xample.com",
    "bücher.example", "BÜCHER.example", "xn--bcher-kva.example", "b\u00fccher.example.",
    "example.com\\u0000", "", ".", "..",
]  # fmt: skip

VALID_AUTHORIZATION = st.sampled_from(
    [b"Bearer {deploy}", b"bearer {scoped}", b"Bearer {scoped}", b"BEARER {deploy}"]
)
AUTHORIZATION = VALID_AUTHORIZATION | st.builds(
    lambda prefix, suffix: prefix + suffix,
    st.sampled_from([b"Bearer {deploy}", b"Bearer {scoped}", b"Bearer ", b"Basic ", b""]),
    st.binary(max_size=12).filter(lambda b: not set(b) & {0x0A, 0x0D}),
)


@st.composite
def api_requests(draw: st.DrawFn) -> tuple[list[bytes], bytes, bool]:
    """(Authorization values, body, chunked?). Mostly one valid token, so that most examples
    get past authentication to the body."""
    if draw(st.integers(0, 3)) < 3:
        authorization = [draw(VALID_AUTHORIZATION)]
    else:
        authorization = draw(st.lists(AUTHORIZATION, max_size=2))
    kind = draw(st.integers(0, 4))
    if kind <= 1:
        body = json.dumps(
            {"domain": draw(st.sampled_from(NEAR_DOMAINS))}, ensure_ascii=draw(st.booleans())
        ).encode()
    elif kind == 2:
        name = json.dumps(draw(st.sampled_from(NEAR_DOMAINS)))
        body = (
            draw(
                st.sampled_from(
                    [
                        '{"domain": %s, "domain": "other.test"}',
                        '{"domain": "other.test", "domain": %s}',
                        '{"domain": [%s]}',
                        '{"domain": {"domain": %s}}',
                        '\ufeff{"domain": %s}',
                        '{"domain": %s}\x00',
                        '{"domain": %s} {"domain": "example.com"}',
                    ]
                )
            )
            .replace("%s", name)
            .encode()
        )
    elif kind == 3:
        # Up to past any recursion limit, within the body limit above.
        depth = draw(st.sampled_from([1, 1000, 5000, 30_000]) | st.integers(1, 32_000))
        body = b'{"domain": ' + b"[" * depth + b'"example.com"' + b"]" * depth + b"}"
    else:
        body = draw(st.binary(max_size=200))
    return authorization, body, draw(st.booleans())


def http_request(host: str, authorization: list[bytes], body: bytes, chunked: bool) -> bytes:
    head = b"POST /api/v1/cdn/clear-cache HTTP/1.1\r\nHost: %s\r\n" % host.encode()
    head += b"Content-Type: application/json\r\nConnection: close\r\n"
    head += b"".join(b"Authorization: " + value + b"\r\n" for value in authorization)
    if chunked:
        framed = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body) if body else b"0\r\n\r\n"
        return head + b"Transfer-Encoding: chunked\r\n\r\n" + framed
    return head + b"Content-Length: %d\r\n\r\n" % len(body) + body


def named_domain(body: bytes) -> str | None:
    """The configured domain a well-formed body names, worked out without the app."""
    try:
        data = json.loads(body.decode("utf-8"), object_pairs_hook=_no_duplicates)
        domain = normalise_domain(data["domain"])
    except (ValueError, TypeError, KeyError, RecursionError, InvalidDomain):
        return None
    return domain if domain in DOMAINS else None


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
    if len({name for name, _ in pairs}) != len(pairs) or [n for n, _ in pairs] != ["domain"]:
        raise ValueError("not exactly one domain field")
    return dict(pairs)


@pytest.fixture
async def api_tokens(api_service: Service) -> dict[bytes, bytes]:
    """The templates in generated Authorization values, and the real tokens they stand for."""
    deploy = await api_service.state.create_token("deploy", Scope.everything(), 0.0)
    scoped = await api_service.state.create_token("scoped", Scope.only([OTHER]), 0.0)
    return {b"{deploy}": deploy.encode(), b"{scoped}": scoped.encode()}


@pytest.mark.slow
@PROPERTY
@given(request=api_requests())
async def test_any_raw_clear_request_gets_200_or_4xx_and_clears_only_what_it_may(
    api_service: Service, api_tokens: dict[bytes, bytes], request: tuple[list[bytes], bytes, bool]
) -> None:
    service = api_service
    authorization, body, chunked = request
    for template, token in api_tokens.items():
        authorization = [value.replace(template, token) for value in authorization]
    before = {domain: (await service.store.lookup(domain, "/")).key[1] for domain in DOMAINS}

    host, port = split_url(service.api_url)
    answer = await exchange(
        service.api_url, http_request(f"{host}:{port}", authorization, body, chunked)
    )

    [response] = answer.responses
    changed = {d for d in DOMAINS if (await service.store.lookup(d, "/")).key[1] != before[d]}
    assert response.status == 200 or 400 <= response.status < 500, response.body
    event(f"status {response.status}")
    if response.status != 200:
        assert changed == set()
        return
    assert response.body == b"Cache cleared"
    [value] = authorization
    assert changed == {named_domain(body)}
    if api_tokens[b"{scoped}"] in value:
        assert changed == {OTHER}
