"""CDN-targeted directives (RFC 9213, Surrogate-Control), Age parsing, must-understand, the
fields a 304 may not update, and serving stale while the origin fails (RFC 5861)."""

from __future__ import annotations

from email.utils import formatdate

import pytest
from multidict import CIMultiDict

from proxy.core.cache.conditional import merge_not_modified
from proxy.core.cache.entry import StoredResponse
from proxy.core.cache.policy import DontStore, Storable, assess_response
from proxy.core.cache.stale_on_error import may_serve_stale
from proxy.core.cache.targeted import (
    cdn_cache_control,
    surrogate_capability,
    surrogate_control,
    targeted_directives,
)
from proxy.core.http.httpdate import age_seconds

NOW = 1_700_000_000.0
Fields = list[tuple[str, str]]
DATE = ("Date", formatdate(NOW, usegmt=True))
ETAG = ("ETag", '"v1"')


def assess(headers: Fields, *, status: int = 200, request: Fields | None = None) -> object:
    return assess_response(
        method="GET",
        request=CIMultiDict(request or []),
        status=status,
        reason="R",
        headers=tuple([DATE, *headers]),
        request_time=NOW,
        response_time=NOW,
        heuristic=False,
        surrogate_name="edge1",
    )


def lifetime(headers: Fields, *, status: int = 200) -> float | str:
    result = assess(headers, status=status)
    if isinstance(result, DontStore):
        return result.reason
    assert isinstance(result, Storable)
    return result.freshness_lifetime


# -- RFC 9213 CDN-Cache-Control -------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        # §2.1: the targeted field replaces Cache-Control and Expires for this cache.
        ([("CDN-Cache-Control", "max-age=3600")], 3600.0),
        ([("Cache-Control", "max-age=1"), ("CDN-Cache-Control", "max-age=3600")], 3600.0),
        ([("Cache-Control", "max-age=3600"), ("CDN-Cache-Control", "max-age=1")], 1.0),
        ([("Cache-Control", "no-store"), ("CDN-Cache-Control", "max-age=100")], 100.0),
        ([("CDN-Cache-Control", "max-age=60"), ("Expires", "Thu, 01 Jan 1970 00:00:00 GMT")], 60.0),
        ([("CDN-Cache-Control", "foobar, max-age=60")], 60.0),  # unknown directives ignored
        ([("CDN-Cache-Control", "max-age=2147483648")], 2147483648.0),
        ([("CDN-Cache-Control", "no-store"), ("Cache-Control", "max-age=60")], "no-store"),
        ([("CDN-Cache-Control", "private"), ("Cache-Control", "max-age=60")], "private"),
        # no-cache without a validator cannot be stored at all
        (
            [("CDN-Cache-Control", "no-cache"), ("Cache-Control", "max-age=60")],
            "no-cache-without-validator",
        ),
        # An invalid Structured Field is ignored as a whole: Cache-Control applies.
        ([("CDN-Cache-Control", "max-age=60, &&&"), ("Cache-Control", "no-store")], "no-store"),
        ([("CDN-Cache-Control", "MaX-aGe=60"), ("Cache-Control", "max-age=5")], 5.0),
        # A directive of the wrong type is ignored on its own; the field still replaces CC.
        (
            [("CDN-Cache-Control", 'max-age="60"'), ("Cache-Control", "max-age=5")],
            "no-explicit-freshness",
        ),
    ],
)
def test_cdn_cache_control(headers: Fields, expected: float | str) -> None:
    assert lifetime(headers) == expected


def test_cdn_cache_control_parsing() -> None:
    assert cdn_cache_control("max-age=10, no-store, x=?0") == {"max-age": "10", "no-store": None}
    assert cdn_cache_control("max-age=-5") == {"max-age": "-1"}
    assert cdn_cache_control('no-cache="set-cookie"') == {"no-cache": "set-cookie"}
    assert cdn_cache_control("max-age=1.5") == {}
    assert cdn_cache_control("Max-Age=1") is None
    assert cdn_cache_control("max-age=1,") is None


# -- Surrogate-Control (W3C Edge Architecture) ----------------------------------------------


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ([("Surrogate-Control", "max-age=3600")], 3600.0),
        ([("Surrogate-Control", "max-age=3600;edge1")], 3600.0),  # targeted at this cache
        ([("Surrogate-Control", "max-age=3600;EDGE1")], 3600.0),
        (  # targeted at another surrogate: Cache-Control applies
            [("Surrogate-Control", "max-age=3600;other"), ("Cache-Control", "max-age=5")],
            5.0,
        ),
        ([("Surrogate-Control", "no-store"), ("Cache-Control", "max-age=60")], "no-store"),
        ([("Cache-Control", "no-store"), ("Surrogate-Control", "max-age=9;edge1")], 9.0),
        ([("Cache-Control", "max-age=3600"), ("Surrogate-Control", "max-age=1")], 1.0),
        (  # says nothing about storing: Cache-Control applies
            [("Surrogate-Control", "content=ESI/1.0"), ("Cache-Control", "max-age=7")],
            7.0,
        ),
        (  # CDN-Cache-Control wins over Surrogate-Control
            [("Surrogate-Control", "max-age=1"), ("CDN-Cache-Control", "max-age=2")],
            2.0,
        ),
    ],
)
def test_surrogate_control(headers: Fields, expected: float | str) -> None:
    assert lifetime(headers) == expected


def test_surrogate_control_parsing_and_capability() -> None:
    assert surrogate_control("max-age=5;a, no-store;b", "a") == {"max-age": "5"}
    assert surrogate_control("max-age=5;a, no-store;b", None) == {}
    assert surrogate_capability("edge1") == 'edge1="Surrogate/1.0"'
    assert targeted_directives([("cache-control", "max-age=5")], "edge1") is None


def test_targeted_fields_are_kept_for_clients() -> None:
    result = assess([("CDN-Cache-Control", "max-age=60"), ("Cache-Control", "no-store")])
    assert isinstance(result, Storable)
    assert ("Cache-Control", "no-store") in result.headers
    assert ("CDN-Cache-Control", "max-age=60") in result.headers


# -- Age (RFC 9111 §5.1), as the current cache-tests suite reads it ---------------------------


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([], 0),
        (["7200"], 7200),
        (["abc"], 0),  # invalid: ignored
        (["-7200"], 0),
        (["7200.0"], 0),
        (["7200, 0"], 7200),  # one field line: its first member
        (["0, 7200"], 0),
        (["7200", "0"], 7200),  # several field lines: the first
        (["0", "7200"], 0),
        (["7200;foo=bar"], 7200),
        (["99999999999999"], 2**31),
    ],
)
def test_age_seconds(values: list[str], expected: int) -> None:
    assert age_seconds(values) == expected


# -- must-understand (§5.2.2.3) --------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (599, "must-understand"),  # not understood: never stored, even when fresh
        (200, 3600.0),  # understood: no-store is ignored
        (404, 3600.0),
    ],
)
def test_must_understand(status: int, expected: float | str) -> None:
    headers = [("Cache-Control", "max-age=3600, must-understand, no-store")]
    assert lifetime(headers, status=status) == expected


# -- §3.2: what a 304 may not update --------------------------------------------------------


def stored(headers: Fields, *, at: float = NOW) -> StoredResponse:
    result = assess_response(
        method="GET",
        request=CIMultiDict(),
        status=200,
        reason="OK",
        headers=tuple([("Date", formatdate(at, usegmt=True)), *headers]),
        request_time=at,
        response_time=at,
        heuristic=False,
    )
    assert isinstance(result, Storable)
    return result.with_body(b"body", "/x")


def test_a_304_does_not_update_fields_that_describe_the_stored_body() -> None:
    entry = stored(
        [
            ("Cache-Control", "max-age=60"),
            ETAG,
            ("Content-Encoding", "gzip"),
            ("Content-MD5", "old"),
            ("Content-Range", "bytes 0-3/4"),
            ("X-Thing", "old"),
        ]
    )
    merged = dict(
        merge_not_modified(
            entry,
            (
                ("ETag", '"v2"'),
                ("Content-Encoding", "br"),
                ("Content-MD5", "new"),
                ("Content-Range", "bytes 0-9/10"),
                ("Content-Length", "10"),
                ("X-Thing", "new"),
            ),
        )
    )
    assert merged["ETag"] == '"v1"'
    assert merged["Content-Encoding"] == "gzip"
    assert merged["Content-MD5"] == "old"
    assert merged["Content-Range"] == "bytes 0-3/4"
    assert "Content-Length" not in merged
    assert merged["X-Thing"] == "new"


# -- serving stale while the origin fails (RFC 9111 §4.2.4, RFC 5861 §4) -----------------------


@pytest.mark.parametrize(
    ("cache_control", "status", "default", "request_cc", "age_past_expiry", "expected"),
    [
        # Disconnected: the domain's window applies when the response says nothing.
        ("max-age=10", None, 60.0, None, 30, True),
        ("max-age=10", None, 60.0, None, 90, False),
        ("max-age=10", None, 0.0, None, 1, False),
        # The response's stale-if-error sets the window, for 5xx too.
        ("max-age=10, stale-if-error=100", 503, 0.0, None, 50, True),
        ("max-age=10, stale-if-error=100", 503, 0.0, None, 150, False),
        ("max-age=10, stale-if-error=100", 404, 0.0, None, 50, False),  # not an error status
        # The domain's window covers 500, 502, 503, 504 as well (decision 0023), not others.
        ("max-age=10", 500, 600.0, None, 5, True),
        ("max-age=10", 504, 600.0, None, 700, False),
        ("max-age=10", 501, 600.0, None, 5, False),
        ("max-age=10", 500, 0.0, None, 5, False),
        # The request's stale-if-error counts too.
        ("max-age=10", 500, 0.0, "stale-if-error=100", 50, True),
        ("max-age=10", 500, 0.0, "stale-if-error=1", 50, False),
        # Forbidden by the response whatever else says yes.
        ("max-age=10, must-revalidate", None, 600.0, "stale-if-error=100", 5, False),
        ("max-age=10, proxy-revalidate", None, 600.0, None, 5, False),
        ("max-age=10, s-maxage=10", None, 600.0, None, 5, False),
        ("max-age=10, stale-if-error=0", None, 600.0, None, 5, False),
    ],
)
def test_may_serve_stale(
    cache_control: str,
    status: int | None,
    default: float,
    request_cc: str | None,
    age_past_expiry: float,
    expected: bool,
) -> None:
    entry = stored([("Cache-Control", cache_control), ETAG])
    request = CIMultiDict([("Cache-Control", request_cc)] if request_cc else [])
    now = entry.expires_at + age_past_expiry
    assert may_serve_stale(entry, request, now, status=status, default_window=default) is expected


def test_no_cache_is_never_served_stale() -> None:
    entry = stored([("Cache-Control", "no-cache, max-age=60"), ETAG])
    assert not may_serve_stale(entry, CIMultiDict(), NOW, status=None, default_window=600.0)
