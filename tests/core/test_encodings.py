"""Accept-Encoding reduced to one coding per request (proxy/core/http/encodings.py, decision 0023).

RFC 9110 §12.5.3 (Accept-Encoding), §12.4.2 (qvalues), §8.4.1.3 (x-gzip is gzip)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.core.http.encodings import (
    CODINGS,
    DEFAULT_ENCODINGS,
    IDENTITY,
    accepted,
    check_encodings,
    preferred,
)

# The issue's eight spellings of "anything a browser takes", and what each reads as with the
# default preference (br, gzip, zstd).
SPELLINGS = [
    (["gzip, deflate, br"], "br"),
    (["br;q=1.0, gzip;q=0.8"], "br"),
    (["GZIP"], "gzip"),
    (["*"], "br"),
    (["gzip;q=0"], IDENTITY),
    ([""], IDENTITY),
    ([], IDENTITY),
    (["gzip", "br"], "br"),  # two fields, combined (RFC 9110 §5.3)
]


@pytest.mark.parametrize(("values", "expected"), SPELLINGS)
def test_the_issues_spellings(values: list[str], expected: str) -> None:
    assert preferred(values, DEFAULT_ENCODINGS) == expected


@pytest.mark.parametrize(
    ("value", "encodings", "expected"),
    [
        ("gzip, br", ("gzip", "br"), "gzip"),  # the domain's order, not the client's
        ("gzip;q=1, br;q=0.1", ("br", "gzip"), "br"),  # weights say only "accepted"
        ("x-gzip", ("br", "gzip"), "gzip"),  # §8.4.1.3
        ("zstd, gzip", ("br", "zstd", "gzip"), "zstd"),
        ("*;q=0, gzip", ("br", "gzip"), "gzip"),  # "*" covers only codings not named
        ("*, br;q=0", ("br", "gzip"), "gzip"),
        ("deflate", DEFAULT_ENCODINGS, IDENTITY),  # deflate is never chosen
        ("gzip;q=2", DEFAULT_ENCODINGS, IDENTITY),  # an invalid weight is not "accepted"
        ("gzip;q=0.0001", DEFAULT_ENCODINGS, IDENTITY),  # more than 3 decimals: invalid
        ("gzip;q=0.001", DEFAULT_ENCODINGS, "gzip"),
        ("gzip ; Q = 0.5", DEFAULT_ENCODINGS, "gzip"),
        ("br", ("gzip", IDENTITY), IDENTITY),  # the domain never asks for br
        ("gzip, br", (IDENTITY,), IDENTITY),  # a domain that wants identity only
        ("identity;q=0", DEFAULT_ENCODINGS, IDENTITY),  # nothing else: identity or 406 anyway
        (",,, ;q=1, gzip", DEFAULT_ENCODINGS, "gzip"),
    ],
)
def test_preference(value: str, encodings: tuple[str, ...], expected: str) -> None:
    assert preferred([value], encodings) == expected


def test_a_coding_named_twice_keeps_its_first_weight() -> None:
    assert accepted("gzip;q=0, GZIP") == {"gzip": 0.0}


def test_a_long_value_is_read_only_up_to_its_bound() -> None:
    """A huge header cannot cost more than MAX_VALUE characters of parsing, nor grow the
    memo with distinct keys beyond its size."""
    assert preferred(["x" * 100_000 + ", gzip"], DEFAULT_ENCODINGS) == IDENTITY
    assert preferred(["gzip, " + "x" * 100_000], DEFAULT_ENCODINGS) == "gzip"


@given(st.lists(st.text(max_size=80), max_size=3))
def test_any_value_reads_as_one_listed_coding_or_identity(values: list[str]) -> None:
    """Whatever the client sends, the key has at most one variant per listed coding plus
    identity."""
    assert preferred(values, DEFAULT_ENCODINGS) in (*DEFAULT_ENCODINGS, IDENTITY)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ([], "must be a non-empty list"),
        ("gzip", "must be a non-empty list"),
        (["deflate"], "'deflate' is not one of"),
        (["gzip", "gzip"], "listed twice"),
        (["identity", "gzip"], "identity must come last"),
        ([1], "1 is not one of"),
    ],
)
def test_a_domains_list_is_checked(value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_encodings(value)


def test_every_coding_may_be_listed() -> None:
    assert check_encodings(list(CODINGS)) == CODINGS
