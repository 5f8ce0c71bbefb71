"""Using stored responses (RFC 9111 §4): lookup, validation, conditional requests and
invalidation."""

from __future__ import annotations

from email.utils import formatdate

import pytest
from multidict import CIMultiDict

from proxy.core.cache.conditional import conditional_headers, merge_not_modified, not_modified
from proxy.core.cache.entry import HEADER_OVERHEAD, StoredResponse
from proxy.core.cache.invalidation import invalidation_targets
from proxy.core.cache.policy import (
    Forward,
    Revalidate,
    Serve,
    Storable,
    assess_response,
    decide_lookup,
    only_if_cached,
    refreshed,
    select_variant,
    vary_values,
)

NOW = 1_700_000_000.0
Fields = list[tuple[str, str]]


def http_date(seconds: float) -> str:
    return formatdate(seconds, usegmt=True)


MODIFIED = http_date(NOW - 86_400)
ORIGIN_HEADERS = [
    ("Date", http_date(NOW)),
    ("Cache-Control", "max-age=60"),
    ("ETag", '"v1"'),
    ("Last-Modified", MODIFIED),
]


def storable(headers: Fields, request: Fields | None = None, at: float = NOW) -> Storable:
    result = assess_response(
        method="GET",
        request=CIMultiDict(request or []),
        status=200,
        reason="OK",
        headers=tuple(headers),
        request_time=at,
        response_time=at,
        heuristic=False,
    )
    assert isinstance(result, Storable), result
    return result


def entry(
    headers: Fields | None = None,
    request: Fields | None = None,
    *,
    body: bytes = b"body",
    at: float = NOW,
) -> StoredResponse:
    """A response stored at ``at``: max-age=60, with an ETag and Last-Modified by default."""
    return storable(ORIGIN_HEADERS if headers is None else headers, request, at).with_body(
        body, "/x"
    )


def gzip_variant(value: str | None, *, body: bytes = b"body") -> StoredResponse:
    headers = [*ORIGIN_HEADERS, ("Vary", "Accept-Encoding")]
    return entry(headers, [] if value is None else [("Accept-Encoding", value)], body=body)


def kind(decision: Serve | Revalidate | Forward) -> str:
    return type(decision).__name__.lower()


# -- §4: lookup --------------------------------------------------------------------------------


def test_nothing_stored_is_a_uri_miss() -> None:
    """RFC 9211 §2.2 fwd=uri-miss: no response is stored for the URI."""
    assert decide_lookup([], CIMultiDict(), NOW) == Forward("uri-miss")


def test_no_matching_variant_is_a_vary_miss() -> None:
    """RFC 9111 §4.1; RFC 9211 §2.2 fwd=vary-miss."""
    variants = [gzip_variant("gzip"), gzip_variant("br")]
    request = CIMultiDict([("Accept-Encoding", "zstd")])
    assert decide_lookup(variants, request, NOW + 1) == Forward("vary-miss")


@pytest.mark.parametrize(
    ("request_headers", "elapsed", "expected"),
    [
        ([], 0, "serve"),
        ([], 59.9, "serve"),
        ([], 60, "revalidate"),  # §4.2: fresh only while age < freshness_lifetime
        ([], 3600, "revalidate"),
        ([("Cache-Control", "no-cache")], 1, "revalidate"),  # §5.2.1.4
        ([("Cache-Control", "No-Cache")], 1, "revalidate"),
        ([("Pragma", "no-cache")], 1, "revalidate"),  # §5.4, without Cache-Control
        ([("Pragma", "no-cache"), ("Cache-Control", "max-age=3600")], 1, "serve"),  # §5.4
        ([("Pragma", "x-other")], 1, "serve"),
        ([("Cache-Control", "max-age=0")], 1, "revalidate"),  # §5.2.1.1
        ([("Cache-Control", "max-age=10")], 10, "serve"),  # age <= max-age
        ([("Cache-Control", "max-age=10")], 11, "revalidate"),
        ([("Cache-Control", "max-age=ten")], 1, "revalidate"),  # invalid: be conservative
        ([("Cache-Control", "min-fresh=30")], 30, "serve"),  # §5.2.1.3: 30 s left
        ([("Cache-Control", "min-fresh=30")], 31, "revalidate"),
        ([("Cache-Control", "max-stale=600")], 61, "revalidate"),  # stale is never served
        ([("Cache-Control", "only-if-cached")], 1, "serve"),
        ([("Cache-Control", "max-age=100"), ("Cache-Control", "no-cache")], 1, "revalidate"),
    ],
)
def test_fresh_is_served_and_stale_is_revalidated(
    request_headers: Fields, elapsed: float, expected: str
) -> None:
    """RFC 9111 §4.2 and the request directives of §5.2.1."""
    stored = entry()
    decision = decide_lookup([stored], CIMultiDict(request_headers), NOW + elapsed)
    assert kind(decision) == expected
    assert not isinstance(decision, Forward)
    assert decision.response is stored


def test_age_from_upstream_counts_against_freshness() -> None:
    """RFC 9111 §4.2.3: an Age of 50 leaves 10 s of a 60 s lifetime."""
    stored = entry([*ORIGIN_HEADERS, ("Age", "50")])
    assert decide_lookup([stored], CIMultiDict(), NOW + 9) == Serve(stored)
    assert decide_lookup([stored], CIMultiDict(), NOW + 10) == Revalidate(stored)
    request = CIMultiDict([("Cache-Control", "max-age=55")])
    assert decide_lookup([stored], request, NOW + 6) == Revalidate(stored, "request")  # age 56


def test_no_cache_response_is_always_revalidated() -> None:
    """RFC 9111 §5.2.2.4: stored, but never used without validation."""
    stored = entry([("Cache-Control", "no-cache, max-age=60"), ("ETag", '"v1"')])
    assert decide_lookup([stored], CIMultiDict(), NOW) == Revalidate(stored)


def test_the_most_recent_matching_variant_is_chosen() -> None:
    """RFC 9111 §4.1: when more than one stored response matches, use the most recent
    (the store returns variants most recent first)."""
    newer_br = gzip_variant("br", body=b"newer br")
    gzip = gzip_variant("gzip", body=b"gzip")
    older_br = gzip_variant("br", body=b"older br")
    variants = [newer_br, gzip, older_br]
    request = CIMultiDict([("Accept-Encoding", "br")])
    assert decide_lookup(variants, request, NOW + 1) == Serve(newer_br)
    request = CIMultiDict([("Accept-Encoding", "gzip")])
    assert decide_lookup(variants, request, NOW + 1) == Serve(gzip)


@pytest.mark.parametrize(
    ("request_headers", "chosen"),
    [
        ([("Accept-Encoding", "gzip")], "gzip"),
        ([("accept-encoding", "gzip,br")], "gzip, br"),
        ([("Accept-Encoding", "gzip ,  br")], "gzip, br"),  # white space around commas
        ([("Accept-Encoding", "gzip"), ("Accept-Encoding", "br")], "gzip, br"),  # combined
        ([], "absent"),
        ([("Accept-Encoding", "br, gzip")], None),  # order is significant
        ([("Accept-Encoding", "GZIP")], None),  # values are compared as they are
        ([("Accept-Encoding", "")], None),  # empty is not absent
    ],
)
def test_select_variant(request_headers: Fields, chosen: str | None) -> None:
    """RFC 9111 §4.1: Vary'd fields match after combining field lines and normalising
    white space; a field absent from both requests matches."""
    variants = {
        "gzip": gzip_variant("gzip"),
        "gzip, br": gzip_variant("gzip, br"),
        "absent": gzip_variant(None),
    }
    selected = select_variant(list(variants.values()), CIMultiDict(request_headers))
    assert selected is (None if chosen is None else variants[chosen])


def test_a_response_without_vary_matches_every_request() -> None:
    """RFC 9111 §4.1: no Vary, no secondary key."""
    stored = entry()
    assert select_variant([stored], CIMultiDict([("Accept-Encoding", "br")])) is stored


@pytest.mark.parametrize(
    ("names", "request_headers", "expected"),
    [
        (("accept-encoding",), [("Accept-Encoding", "gzip,  br")], ("gzip,br",)),
        (
            ("accept-encoding",),
            [("Accept-Encoding", "gzip"), ("accept-encoding", "br")],
            ("gzip,br",),
        ),
        (("accept-encoding",), [], (None,)),
        (("accept-encoding",), [("Accept-Encoding", "")], ("",)),
        (("user-agent", "accept"), [("Accept", "*/*"), ("USER-AGENT", "x")], ("x", "*/*")),
        ((), [("Accept", "*/*")], ()),
    ],
)
def test_vary_values(
    names: tuple[str, ...], request_headers: Fields, expected: tuple[str | None, ...]
) -> None:
    """RFC 9111 §4.1: the request's values for the Vary'd names, in the names' order."""
    assert vary_values(names, CIMultiDict(request_headers)) == expected


@pytest.mark.parametrize(
    ("request_headers", "expected"),
    [
        ([("Cache-Control", "only-if-cached")], True),
        ([("Cache-Control", "max-age=5, Only-If-Cached")], True),
        ([("Cache-Control", "max-age=5")], False),
        ([("Pragma", "only-if-cached")], False),
        ([], False),
    ],
)
def test_only_if_cached(request_headers: Fields, expected: bool) -> None:
    """RFC 9111 §5.2.1.7."""
    assert only_if_cached(CIMultiDict(request_headers)) is expected


# -- §4.3: validation --------------------------------------------------------------------------


def test_conditional_headers_carry_the_stored_validators() -> None:
    """RFC 9111 §4.3.1."""
    assert conditional_headers(entry()) == [
        ("If-None-Match", '"v1"'),
        ("If-Modified-Since", MODIFIED),
    ]
    assert conditional_headers(entry([("Cache-Control", "max-age=60")])) == []


def test_merge_not_modified() -> None:
    """RFC 9111 §4.3.4 / §3.2: the 304's fields replace the stored ones of the same name,
    except Content-Length and fields that are never stored."""
    stored = entry(
        [
            ("Date", http_date(NOW - 600)),
            ("Cache-Control", "max-age=60"),
            ("ETag", '"v1"'),
            ("Content-Length", "4"),
            ("Content-Type", "text/plain"),
            ("Link", "</a>; rel=preload"),
            ("Link", "</b>; rel=preload"),
        ]
    )
    merged = merge_not_modified(
        stored,
        (
            ("Date", http_date(NOW)),
            ("cache-control", "max-age=120"),
            ("Content-Length", "0"),
            ("Age", "7"),
            ("Set-Cookie", "id=1"),
            ("Link", "</c>; rel=preload"),
            ("X-New", "1"),
        ),
    )
    assert merged == (
        ("ETag", '"v1"'),
        ("Content-Length", "4"),
        ("Content-Type", "text/plain"),
        ("Date", http_date(NOW)),
        ("cache-control", "max-age=120"),
        ("Link", "</c>; rel=preload"),
        ("X-New", "1"),
    )


def test_refreshed_keeps_the_body_under_the_new_metadata() -> None:
    """RFC 9111 §4.3.4: a 304 updates the stored response's metadata, not its body."""
    stored = entry(body=b"x" * 100)
    fresh_headers = [("Date", http_date(NOW + 100)), ("Cache-Control", "max-age=300")]
    fresh = storable([*fresh_headers, ("ETag", '"v1"')], at=NOW + 100)
    updated = refreshed(stored, fresh)
    assert updated.body == b"x" * 100
    assert updated.headers == fresh.headers
    assert updated.freshness_lifetime == 300.0
    assert updated.expires_at == NOW + 400
    # Each field costs its characters and HEADER_OVERHEAD: 4 fields became 3. The key costs
    # what it did.
    header_bytes = sum(len(name) + len(value) for name, value in updated.headers)
    old_header_bytes = sum(len(name) + len(value) for name, value in stored.headers)
    assert updated.size == stored.size - old_header_bytes + header_bytes - HEADER_OVERHEAD
    assert updated.key_size == stored.key_size


# -- clients' own conditional requests (RFC 9110 §13.1) ----------------------------------------


@pytest.mark.parametrize(
    ("etag", "request_headers", "expected"),
    [
        ('"v1"', [("If-None-Match", '"v1"')], True),
        ('"v1"', [("If-None-Match", 'W/"v1"')], True),  # weak comparison (§8.8.3.2)
        ('W/"v1"', [("If-None-Match", '"v1"')], True),
        ('"v1"', [("If-None-Match", '"v0", "v1"')], True),
        ('"v1"', [("If-None-Match", '"v0"'), ("If-None-Match", '"v1"')], True),
        ('"v1"', [("If-None-Match", "*")], True),
        ('"v1"', [("If-None-Match", '"v0"')], False),
        ('"v1"', [("If-None-Match", "v1")], False),  # an unquoted tag is another tag
        (None, [("If-None-Match", '"v1"')], False),
        (None, [("If-None-Match", "*")], True),  # "*" matches any stored representation
        # If-Modified-Since is evaluated only without If-None-Match (§13.1.3)
        ('"v1"', [("If-None-Match", '"v0"'), ("If-Modified-Since", http_date(NOW))], False),
        ('"v1"', [("If-Modified-Since", http_date(NOW))], True),
        ('"v1"', [("If-Modified-Since", MODIFIED)], True),  # not modified since, equal
        ('"v1"', [("If-Modified-Since", http_date(NOW - 2 * 86_400))], False),
        ('"v1"', [("If-Modified-Since", "yesterday")], False),
        ('"v1"', [], False),
    ],
)
def test_not_modified(etag: str | None, request_headers: Fields, expected: bool) -> None:
    """RFC 9110 §13.1.2, §13.1.3: answer the client's conditional GET with 304 or not."""
    headers = [("Cache-Control", "max-age=60"), ("Last-Modified", MODIFIED)]
    if etag is not None:
        headers.append(("ETag", etag))
    assert not_modified(entry(headers), CIMultiDict(request_headers)) is expected


def test_if_modified_since_without_a_stored_last_modified() -> None:
    """RFC 9110 §13.1.3: no Last-Modified, nothing to compare: the full response."""
    stored = entry([("Cache-Control", "max-age=60"), ("ETag", '"v1"')])
    request = CIMultiDict([("If-Modified-Since", http_date(NOW))])
    assert not_modified(stored, request) is False


# -- §4.4: invalidation ------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    ("status", "headers", "expected"),
    [
        (200, [], ["/dir/page?x"]),
        (204, [], ["/dir/page?x"]),
        (303, [], ["/dir/page?x"]),
        (199, [], []),
        (400, [], []),  # only non-error responses invalidate
        (404, [("Location", "/new")], []),
        (500, [], []),
        (201, [("Location", "/new")], ["/dir/page?x", "/new"]),
        (201, [("Location", "new?y=1")], ["/dir/page?x", "/dir/new?y=1"]),  # relative
        (201, [("Location", "../up")], ["/dir/page?x", "/up"]),
        (200, [("Content-Location", "http://example.com/c")], ["/dir/page?x", "/c"]),
        (200, [("content-location", "HTTPS://EXAMPLE.COM.:443/c?q")], ["/dir/page?x", "/c?q"]),
        (302, [("Location", "https://example.com")], ["/dir/page?x", "/"]),
        (302, [("Location", "https://other.com/c")], ["/dir/page?x"]),  # other hosts: never
        (302, [("Location", "https://example.com.evil/c")], ["/dir/page?x"]),
        (302, [("Location", "https://user@example.com/c")], ["/dir/page?x"]),
        (302, [("Location", "ftp://example.com/c")], ["/dir/page?x"]),
        (302, [("Location", "//other.com/c")], ["/dir/page?x"]),
        (200, [("Location", "/dir/page?x")], ["/dir/page?x"]),  # no duplicates
        (
            201,
            [("Location", "/a"), ("Content-Location", "/b"), ("X-Other", "/c")],
            ["/dir/page?x", "/a", "/b"],
        ),
    ],
)
def test_invalidation_targets(status: int, headers: Fields, expected: list[str]) -> None:
    """RFC 9111 §4.4: after an unsafe method with a non-error status, invalidate the target
    URI and the Location / Content-Location URIs, but only on the same origin."""
    result = invalidation_targets(
        domain="example.com", target="/dir/page?x", status=status, response_headers=tuple(headers)
    )
    assert result == expected
