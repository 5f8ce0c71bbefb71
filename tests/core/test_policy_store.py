"""Storing responses (RFC 9111 §3) and their freshness (§4.2), from status and headers alone."""

from __future__ import annotations

from email.utils import formatdate

import pytest
from multidict import CIMultiDict

from proxy.core.cache.entry import ENTRY_OVERHEAD
from proxy.core.cache.freshness import corrected_initial_age, explicit_lifetime, heuristic_lifetime
from proxy.core.cache.policy import (
    DontStore,
    Storable,
    assess_response,
)
from proxy.core.http.fields import Headers
from proxy.core.http.httpdate import parse_cache_control

NOW = 1_700_000_000.0
DAY = 86_400.0
Fields = list[tuple[str, str]]


def http_date(seconds: float) -> str:
    return formatdate(seconds, usegmt=True)


DATE = ("Date", http_date(NOW))
ETAG = ("ETag", '"v1"')


def assess(
    headers: Fields,
    *,
    request: Fields | None = None,
    status: int = 200,
    method: str = "GET",
    heuristic: bool = False,
    request_time: float = NOW,
) -> Storable | DontStore:
    return assess_response(
        method=method,
        request=CIMultiDict(request or []),
        status=status,
        reason="OK",
        headers=tuple(headers),
        request_time=request_time,
        response_time=NOW,
        heuristic=heuristic,
    )


def storable(
    headers: Fields,
    *,
    request: Fields | None = None,
    status: int = 200,
    heuristic: bool = False,
) -> Storable:
    result = assess(headers, request=request, status=status, heuristic=heuristic)
    assert isinstance(result, Storable), result
    return result


def cc(*values: str) -> Fields:
    """A response with a Date and one Cache-Control field line per value."""
    return [DATE, *(("Cache-Control", value) for value in values)]


AUTH = [("Authorization", "Bearer secret")]
MAX_AGE = cc("max-age=60")


@pytest.mark.parametrize(
    ("request_headers", "method", "status", "reason"),
    [
        ([], "POST", 200, "method"),
        ([], "HEAD", 200, "method"),
        ([], "get", 200, "method"),  # methods are case-sensitive (RFC 9110 §9.1)
        ([("Cache-Control", "no-store")], "GET", 200, "request-no-store"),  # §5.2.1.5
        ([("cache-control", "max-age=5, No-Store")], "GET", 200, "request-no-store"),
        (AUTH, "GET", 200, "authorization"),  # §3.5
        ([], "GET", 206, "status"),  # §3.3 / §3.4: partial content is not stored here
        ([], "GET", 304, "status"),
        ([], "GET", 101, "status"),
    ],
)
def test_not_stored_for_the_request_or_status(
    request_headers: Fields, method: str, status: int, reason: str
) -> None:
    """RFC 9111 §3: a storable response with max-age=60, refused for its exchange."""
    result = assess(MAX_AGE, request=request_headers, method=method, status=status)
    assert result == DontStore(reason)


@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        (cc("max-age=60, no-store"), "no-store"),  # §5.2.2.5
        (cc("max-age=60", "no-store"), "no-store"),  # every field line counts
        (cc('max-age=60, no-store="x"'), "no-store"),  # an argument does not cancel it
        (cc("private"), "private"),  # §5.2.2.7
        (cc("PRIVATE, max-age=60"), "private"),
        (cc("max-age=60", "private"), "private"),
        (cc('private, private="X-Foo", max-age=60'), "private"),  # unqualified anywhere: out
        ([*MAX_AGE, ("Set-Cookie", "id=1")], "set-cookie"),
        ([*cc('max-age=60, private="Set-Cookie"'), ("Set-Cookie", "id=1")], "set-cookie"),
        ([*MAX_AGE, ("Vary", "*")], "vary-star"),  # §4.1
        ([*MAX_AGE, ("Vary", "Accept"), ("Vary", "Accept-Language, *")], "vary-star"),
        ([DATE, ("Content-Type", "text/plain")], "no-explicit-freshness"),
        (cc("public"), "no-explicit-freshness"),
        ([DATE, ("Last-Modified", http_date(NOW - DAY))], "no-explicit-freshness"),
        ([DATE, ("Expires", "soon")], "stale-without-validator"),  # §5.3
        ([DATE, ("Expires", "0")], "stale-without-validator"),
        ([DATE, ("Expires", http_date(NOW - 10))], "stale-without-validator"),
        (cc("max-age=0"), "stale-without-validator"),
        (cc("max-age=60, max-age=70"), "stale-without-validator"),  # §4.2.1: conflict
        (cc("max-age=60", "max-age=70"), "stale-without-validator"),
        (cc("max-age=soon"), "stale-without-validator"),
        (cc("no-cache"), "no-cache-without-validator"),  # §5.2.2.4
        (cc("no-cache, max-age=60"), "no-cache-without-validator"),
    ],
)
def test_not_stored_for_the_response(headers: Fields, reason: str) -> None:
    """RFC 9111 §3, and the edge's stricter rules: why a GET's 200 is not stored."""
    assert assess(headers) == DontStore(reason)


@pytest.mark.parametrize(
    ("headers", "lifetime", "revalidate_always"),
    [
        (cc("max-age=60"), 60.0, False),
        (cc("s-maxage=10, max-age=60"), 10.0, False),  # §5.2.2.10
        ([*cc("max-age=60, s-maxage=0"), ETAG], 0.0, False),
        ([*MAX_AGE, ("Expires", http_date(NOW + 1000))], 60.0, False),
        ([DATE, ("Expires", http_date(NOW + 1000))], 1000.0, False),
        ([("Date", http_date(NOW - 100)), ("Expires", http_date(NOW + 900))], 1000.0, False),
        ([("Expires", http_date(NOW + 500))], 500.0, False),  # no Date: response_time
        ([DATE, ("Expires", "soon"), ETAG], 0.0, False),  # §5.3: invalid → already expired
        (
            [DATE, ("Expires", http_date(NOW - 1)), ("Last-Modified", http_date(NOW - 9))],
            0.0,
            False,
        ),
        (
            [DATE, ("Expires", http_date(NOW + 6)), ("Expires", http_date(NOW + 9)), ETAG],
            0.0,
            False,
        ),
        ([*cc("max-age=0"), ETAG], 0.0, False),
        ([*cc("no-cache"), ETAG], 0.0, True),  # §5.2.2.4
        ([*cc("no-cache, max-age=60"), ETAG], 60.0, True),
        ([*cc("no-cache"), ("Last-Modified", http_date(NOW - DAY))], 0.0, True),
        (cc('no-cache="X-Foo", max-age=60'), 60.0, False),  # qualified: not revalidate-always
        ([*cc('no-cache, no-cache="X-Foo", max-age=60'), ETAG], 60.0, True),  # both: unqualified
        (cc("max-age=60, must-revalidate"), 60.0, False),  # §5.2.2.2
        (cc("max-age=99999999999"), float(2**31), False),  # §1.2.2
        (cc("max-age=" + "9" * 5000), float(2**31), False),
        ([DATE, ("cache-control", "Max-Age=60")], 60.0, False),
    ],
)
def test_stored_with_freshness_lifetime(
    headers: Fields, lifetime: float, revalidate_always: bool
) -> None:
    """RFC 9111 §4.2.1: s-maxage, then max-age, then Expires - Date; §5.2.2.4 no-cache
    responses are stored only with a validator and revalidated on every use."""
    result = storable(headers)
    assert result.freshness_lifetime == lifetime
    assert result.revalidate_always is revalidate_always


@pytest.mark.parametrize("status", [200, 203, 204, 301, 404, 410, 500, 503])
def test_explicit_freshness_makes_any_final_status_storable(status: int) -> None:
    """RFC 9111 §3: a final status with explicit freshness may be stored, errors included."""
    assert storable([DATE, ("Cache-Control", "max-age=60")], status=status).status == status


@pytest.mark.parametrize(
    ("cache_control", "stored"),
    [
        ("max-age=60", False),
        ("max-age=60, public", True),
        ("s-maxage=60", True),
        ("max-age=60, must-revalidate", True),
        ("max-age=60, private", False),
        ("max-age=60, public, no-store", False),
    ],
)
def test_authorization(cache_control: str, stored: bool) -> None:
    """RFC 9111 §3.5: a response to a request with Authorization is stored by a shared cache
    only when it says public, s-maxage or must-revalidate."""
    result = assess([DATE, ("Cache-Control", cache_control)], request=AUTH)
    assert isinstance(result, Storable) is stored, result


@pytest.mark.parametrize(
    ("headers", "request_headers", "status", "expected"),
    [
        # The reason names the rule that refused, not the Authorization that came with it.
        (MAX_AGE, AUTH, 101, DontStore("status")),
        (cc("must-revalidate"), AUTH, 599, DontStore("not-storable")),
        # §3.5: conflicting s-maxage values are invalid (§4.2.1), so no permission.
        ([*cc("s-maxage=60", "s-maxage=70"), ETAG], AUTH, 200, DontStore("authorization")),
        # §3 ¶2.7: max-age is present, so storable; invalid, so stale and revalidated (§4.2.1).
        ([*cc("max-age=soon"), ETAG], [], 302, 0.0),
    ],
)
def test_the_rule_that_refuses_is_named(
    headers: Fields, request_headers: Fields, status: int, expected: DontStore | float
) -> None:
    """RFC 9111 §3, §3.5: where more than one rule could apply, the table's answer."""
    result = assess(headers, request=request_headers, status=status)
    if isinstance(result, Storable):
        assert result.freshness_lifetime == expected
    else:
        assert result == expected


def test_private_qualified_stores_without_the_listed_fields() -> None:
    """RFC 9111 §5.2.2.7: private="X-Foo" lets a shared cache store the rest."""
    result = storable(
        [
            DATE,
            ("Cache-Control", 'private="X-Foo, X-Baz", max-age=60'),
            ("X-Foo", "user data"),
            ("X-Bar", "2"),
            ("x-baz", "3"),
        ]
    )
    assert result.headers == (
        DATE,
        ("Cache-Control", 'private="X-Foo, X-Baz", max-age=60'),
        ("X-Bar", "2"),
    )
    assert result.freshness_lifetime == 60.0


def test_connection_and_exchange_fields_are_not_stored() -> None:
    """RFC 9111 §3.1: hop-by-hop fields are not stored; Age is recomputed on every use."""
    result = storable(
        [
            DATE,
            ("Cache-Control", "max-age=60"),
            ("Age", "30"),
            ("Keep-Alive", "timeout=5"),
            ("Cache-Status", "origin; hit"),
            ("Content-Type", "text/plain"),
        ]
    )
    assert result.headers == (DATE, ("Cache-Control", "max-age=60"), ("Content-Type", "text/plain"))
    assert result.corrected_initial_age == 30.0


def test_vary_names_are_lowercased_deduplicated_and_valued_from_the_request() -> None:
    """RFC 9111 §4.1: the nominated request fields, and the request's values for them."""
    result = storable(
        [
            DATE,
            ("Cache-Control", "max-age=60"),
            ("Vary", "Accept-Encoding, ACCEPT-encoding"),
            ("vary", "User-Agent,, accept-encoding"),
        ],
        request=[("accept-encoding", "gzip,  br"), ("X-Other", "1")],
    )
    assert result.vary == ("accept-encoding", "user-agent")
    assert result.vary_values == ("gzip,br", None)


def test_validators_are_kept() -> None:
    """RFC 9111 §4.3.1: the stored ETag and Last-Modified are sent when revalidating."""
    modified = http_date(NOW - DAY)
    result = storable([DATE, ("Cache-Control", "max-age=60"), ETAG, ("Last-Modified", modified)])
    assert (result.etag, result.last_modified) == ('"v1"', modified)


@pytest.mark.parametrize(
    ("status", "last_modified", "date", "lifetime"),
    [
        (200, NOW - 1000, NOW, 100.0),  # 10% of Date - Last-Modified
        (203, NOW - 10_000, NOW, 1000.0),
        (301, NOW - 1000, NOW - 500, 50.0),
        (200, NOW - 30 * DAY, NOW, DAY),  # capped at one day
        (200, NOW - 1000, None, 100.0),  # no Date: response_time
    ],
)
def test_heuristic_freshness_when_the_domain_allows_it(
    status: int, last_modified: float, date: float | None, lifetime: float
) -> None:
    """RFC 9111 §4.2.2: a fraction of the time since Last-Modified, for heuristically
    cacheable statuses (RFC 9110 §15.1)."""
    headers = [("Last-Modified", http_date(last_modified))]
    if date is not None:
        headers.append(("Date", http_date(date)))
    assert storable(headers, status=status, heuristic=True).freshness_lifetime == lifetime


@pytest.mark.parametrize(
    "status", [500, 502, 503, 504, 302, 307, 400, 403, 404, 405, 410, 414, 501]
)
def test_never_heuristically_fresh_for_other_statuses(status: int) -> None:
    """RFC 9111 §4.2.2: only heuristically cacheable statuses get a heuristic lifetime, and of
    those never an error status: a guessed lifetime for an error would let one bad answer
    stand for everyone (cache-poisoned denial of service)."""
    headers = [DATE, ("Last-Modified", http_date(NOW - DAY))]
    assert isinstance(assess(headers, status=status, heuristic=True), DontStore)
    assert heuristic_lifetime(status, [(n.lower(), v) for n, v in headers], NOW) is None


@pytest.mark.parametrize(
    "headers",
    [
        [DATE],
        [DATE, ("Last-Modified", "last tuesday")],
        [DATE, ("Last-Modified", http_date(NOW + 10))],  # in the future
        [DATE, ("Last-Modified", http_date(NOW))],
    ],
)
def test_no_heuristic_without_a_usable_last_modified(headers: Fields) -> None:
    """RFC 9111 §4.2.2: the heuristic needs a Last-Modified before the response's Date."""
    assert assess(headers, heuristic=True) == DontStore("no-explicit-freshness")


@pytest.mark.parametrize(
    ("cache_control", "headers", "expected"),
    [
        ("", [], None),
        ("s-maxage=5, max-age=9", [("expires", http_date(NOW + 99))], 5.0),
        ("max-age=9", [("expires", http_date(NOW + 99))], 9.0),
        ("max-age=-3", [], 0.0),
        ("", [("expires", http_date(NOW + 99)), ("date", http_date(NOW + 9))], 90.0),
        ("", [("expires", http_date(NOW - 99))], 0.0),
        ("", [("expires", "Sun Nov  6 08:49:37 1994")], 0.0),  # asctime-date, in the past
        ("", [("expires", "Wed Nov 15 22:13:20 2023")], 86_400.0),  # asctime-date, NOW + 1 day
    ],
)
def test_explicit_lifetime(cache_control: str, headers: Fields, expected: float | None) -> None:
    """RFC 9111 §4.2.1: the first of s-maxage, max-age, Expires - Date that is present."""
    assert explicit_lifetime(parse_cache_control(cache_control), headers, NOW) == expected


@pytest.mark.parametrize(
    ("headers", "request_time", "expected"),
    [
        ([], NOW, 0.0),
        ([("age", "30")], NOW, 30.0),
        ([("age", "30")], NOW - 2, 32.0),  # + response_delay
        ([], NOW - 2, 2.0),
        ([("date", http_date(NOW - 100)), ("age", "30")], NOW, 100.0),  # apparent_age wins
        ([("date", http_date(NOW - 100)), ("age", "300")], NOW - 1, 301.0),
        ([("date", http_date(NOW + 100))], NOW, 0.0),  # origin clock ahead: never negative
        ([("age", "abc")], NOW, 0.0),
        ([("age", "-5")], NOW, 0.0),
        ([("age", "1.5")], NOW, 0.0),
        ([("age", "\u00b2")], NOW, 0.0),  # SUPERSCRIPT TWO: isdigit() but not a DIGIT
        ([("age", "9" * 400)], NOW, float(2**31)),  # §1.2.2: overflow → 2^31
        ([("age", "9" * 5000)], NOW, float(2**31)),
    ],
)
def test_corrected_initial_age(headers: Fields, request_time: float, expected: float) -> None:
    """RFC 9111 §4.2.3: max(apparent_age, Age + response_delay)."""
    assert corrected_initial_age(headers, request_time, NOW) == expected


def test_stored_response_age_and_freshness() -> None:
    """RFC 9111 §4.2.3/§4.2: current_age = corrected_initial_age + resident_time; fresh
    while current_age < freshness_lifetime, precomputed as one deadline."""
    result = storable([("Date", http_date(NOW - 10)), ("Cache-Control", "max-age=60")])
    stored = result.with_body(b"hello", "/x")
    assert stored.birth == NOW - 10  # received at NOW, already 10 seconds old
    assert stored.expires_at == NOW + 50
    assert stored.age(NOW) == 10.0
    assert stored.age(NOW + 5) == 15.0
    assert stored.age(NOW - 15) == 0.0  # a clock step back never makes the age negative
    assert stored.is_fresh(NOW + 49.5)
    assert not stored.is_fresh(NOW + 50)
    assert stored.body == b"hello"


def test_revalidate_always_is_never_fresh() -> None:
    """RFC 9111 §5.2.2.4: no-cache responses are validated on every use, even when young."""
    stored = storable([DATE, ("Cache-Control", "no-cache, max-age=60"), ETAG]).with_body(b"", "/")
    assert stored.expires_at == NOW + 60
    assert not stored.is_fresh(NOW)


def test_size_counts_body_headers_target_and_overhead() -> None:
    """What an entry counts against cache.max_bytes: every body byte, header and target
    character (the target twice: the key and the lookup string), plus a fixed overhead."""
    base = storable([("Cache-Control", "max-age=60")])
    small = base.with_body(b"x" * 100, "/path")
    assert small.size >= 100 + (13 + 10) + 2 * 5 + ENTRY_OVERHEAD
    assert base.with_body(b"x" * 300, "/path").size - small.size == 200
    assert base.with_body(b"x" * 100, "/path/longer").size - small.size == 2 * 7
    with_etag = storable([("Cache-Control", "max-age=60"), ("ETag", '"v1"')])
    assert with_etag.with_body(b"x" * 100, "/path").size - small.size >= 4 + 4


def test_headers_type_is_a_tuple_of_pairs() -> None:
    """Stored headers are immutable, so one entry can be shared by concurrent hits."""
    headers: Headers = storable([DATE, ("Cache-Control", "max-age=60")]).headers
    assert isinstance(headers, tuple)
    assert all(isinstance(pair, tuple) and len(pair) == 2 for pair in headers)
