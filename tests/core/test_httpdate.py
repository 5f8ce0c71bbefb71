"""HTTP-date (RFC 9110 §5.6.7) and Cache-Control (RFC 9111 §5.2, §1.2.2) parsing."""

from __future__ import annotations

from email.utils import formatdate

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.core.http.httpdate import (
    Directives,
    delta_seconds,
    field_names,
    parse_cache_control,
    parse_http_date,
)

NOW = 1_700_000_000.0
RFC_EXAMPLE = 784_111_777.0  # Sun, 06 Nov 1994 08:49:37 GMT, RFC 9110 §5.6.7's example


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (formatdate(NOW, usegmt=True), NOW),
        ("Tue, 14 Nov 2023 22:13:20 GMT", NOW),
        ("Sun, 06 Nov 1994 08:49:37 GMT", RFC_EXAMPLE),  # IMF-fixdate
        ("Sunday, 06-Nov-94 08:49:37 GMT", RFC_EXAMPLE),  # obsolete RFC 850 format
        ("Sun Nov  6 08:49:37 1994", RFC_EXAMPLE),  # obsolete asctime format, implicitly GMT
        (None, None),
        ("", None),
        ("0", None),
        ("-1", None),
        ("yesterday", None),
        ("Sun, 06 Nov 1994 25:49:37 GMT", None),
        ("Sun, 32 Nov 1994 08:49:37 GMT", None),
        # Names in any case are still the same names.
        ("SUN, 06 NOV 1994 08:49:37 gmt", RFC_EXAMPLE),
        ("Thursday, 18-Aug-50 02:01:18 GMT", 2544400878.0),  # two-digit year 50 is 2050
        # Not one of the three formats: invalid (cache-tests' freshness-expires-invalid-*).
        ("Sun, 06 Nov 1994 08:49:37 UTC", None),
        ("Sun, 06 Nov 1994 08:49:37 AEST", None),
        ("Sun, 06 Nov 94 08:49:37 GMT", None),
        ("Sun 06 Nov 1994 08:49:37 GMT", None),
        ("Sun, 06  Nov  1994 08:49:37 GMT", None),
        ("Sun, 06-Nov-1994 08:49:37 GMT", None),
        ("Sun, 06 Nov 1994 08.49.37 GMT", None),
        ("Sun, 06 Nov 1994 8:49:37 GMT", None),
        ("Sun, 6 Nov 1994 08:49:37 GMT", None),
        ("Sun, 06 Nov 1994 08:49:37 +0000", None),
    ],
)
def test_parse_http_date(value: str | None, expected: float | None) -> None:
    """RFC 9110 §5.6.7: a recipient MUST accept all three HTTP-date formats; anything
    else is invalid (None), which callers treat per their rule (e.g. Expires → stale)."""
    assert parse_http_date(value) == expected


@given(st.integers(min_value=0, max_value=253_402_300_799))  # up to 9999-12-31T23:59:59Z
def test_http_date_round_trip(seconds: int) -> None:
    """Property: formatting a time as IMF-fixdate and parsing it gives the same second."""
    assert parse_http_date(formatdate(seconds, usegmt=True)) == float(seconds)


@given(st.text())
def test_parse_http_date_never_raises(value: str) -> None:
    """Property: any field value gives a float or None."""
    result = parse_http_date(value)
    assert result is None or isinstance(result, float)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, {}),
        ("", {}),
        ("max-age=60", {"max-age": "60"}),
        ("Max-Age=60, NO-CACHE", {"max-age": "60", "no-cache": None}),  # names are case-insensitive
        ("public,max-age=60", {"public": None, "max-age": "60"}),
        (" max-age = 60 , public ", {"max-age": "60", "public": None}),
        (", ,max-age=1,,", {"max-age": "1"}),
        ('max-age="60"', {"max-age": "60"}),  # quoted-string form
        (
            'private="Set-Cookie, X-Foo", max-age=5',
            {"private": "Set-Cookie, X-Foo", "max-age": "5"},
        ),
        ('no-cache="a,b",no-store', {"no-cache": "a,b", "no-store": None}),
        ('ext="a \\" , b", max-age=1', {"ext": 'a " , b', "max-age": "1"}),
        ("max-age=60, max-age=60", {"max-age": "60"}),  # a repeat with the same value is harmless
        ("=5, max-age=1", {"max-age": "1"}),
    ],
)
def test_parse_cache_control(value: str | None, expected: Directives) -> None:
    """RFC 9111 §5.2: comma-separated directives, token or quoted-string arguments;
    commas inside quoted strings do not separate directives."""
    assert parse_cache_control(value) == expected


@pytest.mark.parametrize(
    ("value", "name", "expected"),
    [
        ("max-age=60", "max-age", 60),
        ("max-age=0", "max-age", 0),
        ("max-age=007", "max-age", 7),
        ('max-age="60"', "max-age", 60),
        ("public", "max-age", None),  # absent
        ("max-age", "max-age", -1),  # no argument
        ("max-age=", "max-age", -1),
        ("max-age=-1", "max-age", -1),
        ("max-age=1.5", "max-age", -1),
        ("max-age=abc", "max-age", -1),
        ("max-age=\u0663", "max-age", -1),  # ARABIC-INDIC DIGIT THREE: not a DIGIT
        ("max-age=60, max-age=70", "max-age", -1),  # conflicting duplicates (§4.2.1)
        ("max-age=2147483648", "max-age", 2**31),
        ("max-age=99999999999999999999", "max-age", 2**31),  # §1.2.2: overflow → 2^31
        ("max-age=" + "9" * 5000, "max-age", 2**31),  # longer than int() will parse
    ],
)
def test_delta_seconds(value: str, name: str, expected: int | None) -> None:
    """RFC 9111 §1.2.2: delta-seconds = 1*DIGIT; a value too large to represent MUST be
    taken as 2^31; invalid (or conflicting) values are -1, which callers treat as stale."""
    assert delta_seconds(parse_cache_control(value), name) == expected


@pytest.mark.parametrize(
    ("argument", "expected"),
    [
        (None, []),
        ("", []),
        ("Set-Cookie", ["set-cookie"]),
        (" Set-Cookie , X-Foo ,, ", ["set-cookie", "x-foo"]),
    ],
)
def test_field_names(argument: str | None, expected: list[str]) -> None:
    """RFC 9111 §5.2.2.4, §5.2.2.7: qualified no-cache / private list field names."""
    assert field_names(argument) == expected


@given(st.text())
def test_parse_cache_control_never_raises(value: str) -> None:
    """Property: any text parses to directives with lowercase, stripped, non-empty names."""
    directives = parse_cache_control(value)
    for name in directives:
        assert name
        assert name == name.strip().lower()


@pytest.mark.slow
@given(st.one_of(st.none(), st.text(), st.text(alphabet="0123456789", min_size=1)))
def test_delta_seconds_never_raises(argument: str | None) -> None:
    """Property: whatever the argument, delta_seconds gives -1 or 0..2^31."""
    seconds = delta_seconds({"max-age": argument}, "max-age")
    assert seconds is not None
    assert -1 <= seconds <= 2**31
    if argument is not None and argument.isascii() and argument.isdigit():
        significant = argument.lstrip("0")
        assert seconds == (2**31 if len(significant) > 10 else min(int(argument), 2**31))
