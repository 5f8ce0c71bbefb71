"""Which header fields cross the proxy (RFC 9110 §7.6), and Cache-Status (RFC 9211)."""

from __future__ import annotations

import http_sf
import pytest

from proxy.core.http.headers import (
    cache_status,
    connection_tokens,
    field_name,
    from_origin,
    not_passed_on_fill,
    to_origin,
    via_value,
)

CLIENT_HEADERS = [
    ("Host", "Example.COM:8080"),
    ("Accept", "*/*"),
    ("Connection", "keep-alive, X-Secret"),
    ("Keep-Alive", "timeout=5"),
    ("X-Secret", "connection-only"),
    ("TE", "trailers"),
    ("Transfer-Encoding", "chunked"),
    ("Upgrade", "h2c"),
    ("Proxy-Connection", "keep-alive"),
    ("Proxy-Authorization", "Basic eDp5"),
    ("Forwarded", "for=192.0.2.1;proto=http"),
    ("X-Forwarded-For", "192.0.2.1"),
    ("X-Forwarded-Host", "evil.example"),
    ("X-Forwarded-Proto", "http"),
    ("X-Real-IP", "192.0.2.1"),
    ("X-Original-URL", "/admin"),
    ("CDN-Loop", "other"),
    ("Via", "1.1 upstream"),
    ("Cookie", "a=b"),
    ("X-HTTP-Method-Override", "DELETE"),
    ("If-None-Match", '"v1"'),
    ("If-Modified-Since", "Sun, 06 Nov 1994 08:49:37 GMT"),
    ("Range", "bytes=0-1"),
    ("Accept-Encoding", "gzip"),
]

PROXY_SET = [
    ("Host", "example.com"),
    ("Via", "1.1 upstream, 1.1 cdn-proxy"),
    ("X-Forwarded-For", "203.0.113.7"),
    ("X-Forwarded-Proto", "https"),
    ("X-Forwarded-Host", "example.com"),
]


def _to_origin(headers: list[tuple[str, str]], *, cacheable: bool) -> list[tuple[str, str]]:
    return to_origin(
        headers,
        domain="example.com",
        client_address="203.0.113.7",
        scheme="https",
        via="cdn-proxy",
        cacheable=cacheable,
    )


def test_to_origin_for_a_cacheable_request() -> None:
    """RFC 9110 §7.6.1: hop-by-hop and Connection-listed fields go; the client's forwarding
    claims go and the proxy's own X-Forwarded-* are set; Via is appended (§7.6.3); on a
    cacheable fill the method override and the client's conditions and ranges go too."""
    assert _to_origin(CLIENT_HEADERS, cacheable=True) == [
        ("Accept", "*/*"),
        ("Cookie", "a=b"),
        ("Accept-Encoding", "gzip"),
        *PROXY_SET,
    ]


def test_to_origin_for_an_uncacheable_request_keeps_conditions_and_overrides() -> None:
    """A pass-through request is the client's own: its conditions and range go as sent."""
    assert _to_origin(CLIENT_HEADERS, cacheable=False) == [
        ("Accept", "*/*"),
        ("Cookie", "a=b"),
        ("X-HTTP-Method-Override", "DELETE"),
        ("If-None-Match", '"v1"'),
        ("If-Modified-Since", "Sun, 06 Nov 1994 08:49:37 GMT"),
        ("Range", "bytes=0-1"),
        ("Accept-Encoding", "gzip"),
        *PROXY_SET,
    ]


def test_to_origin_without_via_or_host_from_the_client() -> None:
    """The proxy's fields are there even when the client sent none; names match any case."""
    headers = [("accept", "text/html"), ("x-forwarded-for", "10.0.0.1"), ("HOST", "x")]
    assert _to_origin(headers, cacheable=True) == [
        ("accept", "text/html"),
        ("Host", "example.com"),
        ("Via", "1.1 cdn-proxy"),
        ("X-Forwarded-For", "203.0.113.7"),
        ("X-Forwarded-Proto", "https"),
        ("X-Forwarded-Host", "example.com"),
    ]


@pytest.mark.parametrize(
    "name",
    [
        "X_Forwarded_Host",
        "X-Forwarded_Host",
        "x_real_ip",
        "X_Original_URL",
        "Transfer_Encoding",
        "X_HTTP_Method_Override",
        "X-Forwarded-Prefix",
        "X-Forwarded-Uri",
        "X-Forwarded-Path",
        "X-Original-URI",
        "X-HTTP-Host-Override",
        "Content_Length",  # framing read from an underscore spelling (issue 24)
        "Content-Length",  # framing is the origin client's, never the client's (issue 30)
        "content-length",
        "Transfer-Encoding",
        "X-Forwarded-User",
        "X_Forwarded_Client_Cert",
        "X-Forwarded",
        "CF-Connecting-IP",
        "Client_IP",
        "X-Url-Scheme",
    ],
)
def test_to_origin_drops_every_spelling_an_origin_reads_as_a_dropped_field(name: str) -> None:
    """CGI and WSGI read '-' and '_' alike (HTTP_X_FORWARDED_HOST), so an underscore
    spelling of a forwarding, hop-by-hop or override field is that field."""
    out = _to_origin([("Accept", "*/*"), (name, "evil")], cacheable=True)
    assert out == [
        ("Accept", "*/*"),
        ("Host", "example.com"),
        ("Via", "1.1 cdn-proxy"),
        ("X-Forwarded-For", "203.0.113.7"),
        ("X-Forwarded-Proto", "https"),
        ("X-Forwarded-Host", "example.com"),
    ]


@pytest.mark.parametrize("name", ["X-Forwarded-User", "X_Forwarded_Groups", "CF-Connecting-IP"])
def test_to_origin_passes_front_end_fields_from_a_trusted_peer(name: str) -> None:
    """A trusted proxy is the front end that writes them (issue 24); the trio stays the
    edge's own, and Content-Length is still never taken from '_'."""
    fields = [(name, "alice"), ("X-Forwarded-Host", "evil"), ("Content_Length", "0")]
    out = to_origin(
        fields,
        domain="example.com",
        client_address="203.0.113.7",
        scheme="https",
        via="cdn-proxy",
        cacheable=True,
        trusted_peer=True,
    )
    assert out[0] == (name, "alice")
    assert [n for n, _ in out].count("X-Forwarded-Host") == 1
    assert ("X-Forwarded-Host", "example.com") in out
    assert "Content_Length" not in [n for n, _ in out]


def test_to_origin_keeps_other_underscore_fields() -> None:
    assert ("X_Custom", "1") in _to_origin([("X_Custom", "1")], cacheable=True)


def test_field_name() -> None:
    assert field_name("X_Forwarded-HOST") == "x-forwarded-host"


def test_not_passed_on_fill() -> None:
    """The fields a fill changes: fixed ones, and whatever this request's Connection names."""
    fields = not_passed_on_fill(["keep-alive, Accept-Language", "X_Custom"])
    for name in ("accept-language", "x-custom", "x-forwarded-for", "via", "te", "range"):
        assert name in fields, name
    for name in ("accept-encoding", "cookie", "authorization", "host", "user-agent"):
        assert name not in fields, name
    assert "accept-language" not in not_passed_on_fill([])


def test_to_origin_joins_several_via_fields_in_order() -> None:
    """RFC 9110 §7.6.3: each proxy appends its own entry to the list."""
    headers = [("Via", "1.0 a"), ("Accept", "*/*"), ("via", "1.1 b, 1.1 c")]
    out = dict(_to_origin(headers, cacheable=True))
    assert out["Via"] == "1.0 a, 1.1 b, 1.1 c, 1.1 cdn-proxy"


@pytest.mark.parametrize(
    ("previous", "expected"),
    [
        ([], "1.1 edge"),
        (["1.0 a"], "1.0 a, 1.1 edge"),
        (["1.0 a", "1.1 b, 1.1 c"], "1.0 a, 1.1 b, 1.1 c, 1.1 edge"),
    ],
)
def test_via_value_appends_this_proxy_after_the_others(previous: list[str], expected: str) -> None:
    """RFC 9110 §7.6.3: each proxy appends its own entry, the earlier ones kept in order; the
    one rule for requests to the origin and for responses (respond.py)."""
    assert via_value(previous, "edge") == expected


def test_from_origin() -> None:
    """RFC 9110 §7.6.1: hop-by-hop and Connection-listed fields are not forwarded; the proxy
    sets Content-Length from the body it sends and writes its own Cache-Status."""
    headers = [
        ("Connection", "close, X-Hop"),
        ("X-Hop", "1"),
        ("Keep-Alive", "timeout=5"),
        ("Transfer-Encoding", "chunked"),
        ("Content-Length", "5"),
        ("Cache-Status", "origin-cache; hit"),
        ("Content-Type", "text/plain"),
        ("Set-Cookie", "a=b"),
        ("ETag", '"v1"'),
        ("Upgrade", "h2c"),
        ("Trailer", "X-Sum"),
    ]
    assert from_origin(headers) == (
        ("Content-Type", "text/plain"),
        ("Set-Cookie", "a=b"),
        ("ETag", '"v1"'),
    )


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ([], set()),
        ([("Connection", "close")], {"close"}),
        ([("connection", " X-A ,x-b,, "), ("CONNECTION", "X-C")], {"x-a", "x-b", "x-c"}),
        ([("X-Connection", "x-a")], set()),
    ],
)
def test_connection_tokens(headers: list[tuple[str, str]], expected: set[str]) -> None:
    """RFC 9110 §7.6.1: Connection options are case-insensitive field names."""
    assert connection_tokens(headers) == expected


@pytest.mark.parametrize(
    ("hit", "fwd", "stored", "collapsed", "ttl", "detail", "expected"),
    [
        (True, None, False, False, 5, None, "cdn-proxy; hit; ttl=5"),
        (False, "uri-miss", True, False, None, None, "cdn-proxy; fwd=uri-miss; stored"),
        (False, "vary-miss", False, False, None, None, "cdn-proxy; fwd=vary-miss"),
        (False, "stale", True, False, 60, None, "cdn-proxy; fwd=stale; stored; ttl=60"),
        (True, None, False, False, -3, None, "cdn-proxy; hit; ttl=-3"),
        (False, "uri-miss", False, True, None, None, "cdn-proxy; fwd=uri-miss; collapsed"),
        (
            False,
            "request",
            False,
            False,
            None,
            "no-store",
            'cdn-proxy; fwd=request; detail="no-store"',
        ),
        (False, None, False, False, None, None, "cdn-proxy"),
    ],
)
def test_cache_status(
    hit: bool,
    fwd: str | None,
    stored: bool,
    collapsed: bool,
    ttl: int | None,
    detail: str | None,
    expected: str,
) -> None:
    """RFC 9211 §2: a list member, the cache's name then its parameters, as in §2's
    examples ("ExampleCache; hit; ttl=...", "ExampleCache; fwd=uri-miss; stored")."""
    status = cache_status(
        "cdn-proxy", hit=hit, fwd=fwd, stored=stored, collapsed=collapsed, ttl=ttl, detail=detail
    )
    assert status == expected


@pytest.mark.parametrize(
    ("name", "detail", "parsed_name", "parsed_detail"),
    [
        ("cdn-proxy", "too large", http_sf.Token("cdn-proxy"), "too large"),
        ("cdn-proxy", 'said "no"', http_sf.Token("cdn-proxy"), 'said "no"'),
        ("cdn-proxy", "a\\b; c=d, e", http_sf.Token("cdn-proxy"), "a\\b; c=d, e"),
        ("cdn-proxy", "caf\u00e9\r\n", http_sf.Token("cdn-proxy"), "caf???"),
        ("edge.1_a", "x", http_sf.Token("edge.1_a"), "x"),
        ("1st-edge", "x", "1st-edge", "x"),  # not a Token (starts with a digit): a String
        ("_edge", "x", "_edge", "x"),
    ],
)
def test_cache_status_reads_back_as_sent(
    name: str, detail: str, parsed_name: object, parsed_detail: str
) -> None:
    """RFC 9211 §2: Cache-Status is an RFC 8941 List; each member is the cache's name (Token
    or String) with parameters, ``detail`` a String. Whatever the name or detail, the field
    parses, and gives back what was sent (a character no String may hold becomes '?')."""
    status = cache_status(name, fwd="uri-miss", stored=True, detail=detail)
    parsed = http_sf.parse(status.encode("ascii"), tltype="list")
    assert parsed == [
        (parsed_name, {"fwd": http_sf.Token("uri-miss"), "stored": True, "detail": parsed_detail})
    ]
