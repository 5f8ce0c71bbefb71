"""The rule table of RFC 9111 §3 for a shared cache, and the fields a stored response keeps."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.core.cache.storability import NOT_STORED, refusal, stored_fields
from proxy.core.http.httpdate import parse_cache_control

Fields = list[tuple[str, str]]


def refused(
    cache_control: str = "max-age=60",
    *,
    status: int = 200,
    method: str = "GET",
    fields: tuple[str, ...] = ("cache-control",),
    vary: tuple[str, ...] = (),
    request_no_store: bool = False,
    authorization: bool = False,
    not_forwarded: frozenset[str] = frozenset(),
) -> str | None:
    return refusal(
        method=method,
        status=status,
        directives=parse_cache_control(cache_control),
        fields=fields,
        vary=vary,
        request_no_store=request_no_store,
        authorization=authorization,
        not_forwarded=not_forwarded,
    )


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (100, "status"),
        (103, "status"),
        (206, "status"),
        (304, "status"),
        (200, None),
        (302, None),
        (500, None),
        (599, None),
    ],
)
def test_only_final_understood_statuses(status: int, expected: str | None) -> None:
    """RFC 9111 §3 ¶2.2-2.3: the status is final, and 206 and 304 are understood (this cache
    stores neither: no partial content, and a 304 only updates a stored response)."""
    assert refused(status=status) == expected


@pytest.mark.parametrize(
    ("cache_control", "status", "expected"),
    [
        ("no-store", 200, "no-store"),  # §5.2.2.5
        ('no-store="x"', 200, "no-store"),
        ("max-age=60, no-store, must-understand", 200, None),  # §5.2.2.3: no-store ignored
        ("max-age=60, no-store, must-understand", 599, "must-understand"),
        ("max-age=60, must-understand", 206, "must-understand"),
        ("private", 200, "private"),  # §5.2.2.7
        ('private=""', 200, "private"),  # an empty list qualifies nothing
        ('private, private="x"', 200, "private"),  # given both ways: unqualified
        ('private="x-foo", max-age=60', 200, None),
    ],
)
def test_response_directives(cache_control: str, status: int, expected: str | None) -> None:
    """RFC 9111 §3 ¶2.3-2.5: must-understand, no-store and unqualified private."""
    assert refused(cache_control, status=status) == expected


@pytest.mark.parametrize(
    ("cache_control", "expected"),
    [
        ("max-age=60", "authorization"),
        ("max-age=60, public", None),
        ("must-revalidate", None),
        ("s-maxage=60", None),
        ("s-maxage=0", None),
        ("s-maxage=soon", "authorization"),  # not a delta-seconds: no clear permission
        ("s-maxage=60, s-maxage=70", "authorization"),  # conflicting: invalid
        ("max-age=60, proxy-revalidate", "authorization"),
        ('max-age=60, private="x"', "authorization"),
    ],
)
def test_authorization(cache_control: str, expected: str | None) -> None:
    """RFC 9111 §3.5: an answer to a request with Authorization is stored by a shared cache
    only when public, s-maxage or must-revalidate says it may be."""
    assert refused(cache_control, authorization=True) == expected


@pytest.mark.parametrize(
    ("cache_control", "fields", "status", "expected"),
    [
        ("", ("date",), 302, "not-storable"),
        ("no-cache", ("cache-control",), 302, "not-storable"),
        ("public", ("cache-control",), 302, None),  # §5.2.2.9
        ("", ("expires",), 302, None),  # §5.3
        ("max-age=60", ("cache-control",), 302, None),  # §5.2.2.1
        ("max-age=soon", ("cache-control",), 302, None),  # present, so stale (§4.2.1)
        ("s-maxage=60", ("cache-control",), 302, None),  # §5.2.2.10
        ("", ("date",), 200, None),  # §4.2.2: heuristically cacheable
        ("", ("date",), 404, None),
        ("", ("date",), 500, "not-storable"),
    ],
)
def test_the_response_says_it_may_be_stored(
    cache_control: str, fields: tuple[str, ...], status: int, expected: str | None
) -> None:
    """RFC 9111 §3 ¶2.7: public, Expires, max-age, s-maxage, or a heuristically cacheable
    status (RFC 9110 §15.1). Whether it has a lifetime is decided later (§4.2)."""
    assert refused(cache_control, fields=fields, status=status) == expected


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"method": "POST"}, "method"),  # §3 ¶2.1
        ({"method": "HEAD"}, "method"),
        ({"request_no_store": True}, "request-no-store"),  # §5.2.1.5
        ({"fields": ("cache-control", "set-cookie")}, "set-cookie"),
        ({"fields": ("cache-control", "set-cookie2")}, "set-cookie"),
        ({"vary": ("accept", "*")}, "vary-star"),  # §4.1
        ({"vary": ("accept",), "not_forwarded": frozenset({"accept"})}, "vary-not-forwarded"),
        ({"vary": ("accept",), "not_forwarded": frozenset({"x-forwarded-for"})}, None),
        ({"method": "POST", "status": 100}, "method"),  # the request's rules come first
        ({"fields": ("set-cookie",), "status": 304}, "set-cookie"),
    ],
)
def test_the_edges_own_rules(arguments: dict[str, object], expected: str | None) -> None:
    """RFC 9111 §3, §4.1, §5.2.1.5, and the edge's stricter rules: one user's cookie is never
    shared, nor a response chosen by a field the origin did not see as the client sent it."""
    assert refused(**arguments) == expected  # type: ignore[arg-type]


def test_stored_fields_drop_connection_and_exchange_fields() -> None:
    """RFC 9111 §3.1: connection-specific fields are not stored; Age is recomputed (§4.2.3)
    and an upstream Cache-Status is the upstream's (RFC 9211 §2)."""
    headers = (*((name.title(), "1") for name in sorted(NOT_STORED)), ("X-Kept", "2"))
    assert stored_fields(headers, {}) == (("X-Kept", "2"),)


@pytest.mark.parametrize(
    ("cache_control", "kept"),
    [
        ('no-cache="X-Foo"', ["x-bar", "x-baz"]),  # §5.2.2.4
        ('private="x-foo, X-BAZ"', ["x-bar"]),  # §5.2.2.7
        ('no-cache="x-foo", private="x-bar"', ["x-baz"]),
        ("no-cache", ["x-foo", "x-bar", "x-baz"]),  # unqualified: revalidated instead
        ('no-cache, no-cache="x-foo"', ["x-foo", "x-bar", "x-baz"]),
    ],
)
def test_stored_fields_drop_qualified_fields(cache_control: str, kept: list[str]) -> None:
    """RFC 9111 §5.2.2.4 and §5.2.2.7: the fields a qualified no-cache or private names are
    not stored; the rest of the response may be."""
    headers = (("X-Foo", "1"), ("x-bar", "2"), ("X-Baz", "3"))
    stored = stored_fields(headers, parse_cache_control(cache_control))
    assert [name.lower() for name, _ in stored] == kept


_TCHAR = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789!#$%&'*+-.^_`|~"
field_name = st.text(_TCHAR, min_size=1, max_size=12)


@given(
    st.sampled_from(["no-cache", "private"]),
    st.lists(field_name, min_size=1, max_size=5),
    st.lists(st.tuples(field_name, st.text(max_size=5)), max_size=8),
)
def test_a_qualified_directive_drops_exactly_the_fields_it_names(
    directive: str, named: list[str], headers: Fields
) -> None:
    """RFC 9111 §5.2.2.4 / §5.2.2.7, parsed from the field as sent: whatever the names' case,
    spacing or order, exactly the named fields go, and every other field stays in order."""
    cache_control = f'max-age=60, {directive}="{" , ".join(named)}"'
    stored = stored_fields(tuple(headers), parse_cache_control(cache_control))
    gone = {name.lower() for name in named} | NOT_STORED
    assert list(stored) == [field for field in headers if field[0].lower() not in gone]


_DIRECTIVES = st.sampled_from(
    ["public", "must-revalidate", "s-maxage=5", "s-maxage=x", "max-age=9", "no-cache"]
)


@given(st.lists(_DIRECTIVES, max_size=4, unique=True))
def test_authorization_needs_an_explicit_permission(directives: list[str]) -> None:
    """RFC 9111 §3.5, over every combination: a response to an authorized request is
    storable exactly when public, must-revalidate or a valid s-maxage is present (given
    twice with different values, it is invalid)."""
    valid_s_maxage = "s-maxage=5" in directives and "s-maxage=x" not in directives
    allowed = valid_s_maxage or bool({"public", "must-revalidate"} & set(directives))
    result = refused(", ".join(directives), authorization=True)
    assert (result is None) is allowed, result
    assert result in (None, "authorization")


@pytest.mark.slow
@given(st.text(max_size=60), st.integers(100, 599))
def test_any_cache_control_gets_a_verdict(cache_control: str, status: int) -> None:
    """Whatever the origin sends, the table answers (no exception) with a known reason."""
    result = refused(cache_control, status=status, authorization=True)
    known = {"status", "must-understand", "no-store", "private", "authorization", "not-storable"}
    assert result is None or result in known
