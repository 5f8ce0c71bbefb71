"""Range requests answered from a whole response: RFC 9110 §14 (ranges), §13.1.5 (If-Range),
§15.3.7 (206) and §15.5.17 (416). proxy/core/http/ranges.py."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.core.http.ranges import (
    MAX_RANGES,
    Part,
    RangeDecision,
    Unsatisfiable,
    Whole,
    coalesced,
    decide_range,
    fetches_whole,
    if_range_holds,
    parse_range,
)

ETAG = '"v1"'
LAST_MODIFIED = "Tue, 15 Nov 1994 08:12:31 GMT"


def decide(
    ranges: list[str],
    *,
    length: int = 10_000,
    method: str = "GET",
    status: int = 200,
    if_range: str | None = None,
    etag: str | None = ETAG,
    last_modified: str | None = LAST_MODIFIED,
) -> RangeDecision:
    return decide_range(
        method=method,
        status=status,
        ranges=ranges,
        if_range=if_range,
        etag=etag,
        last_modified=last_modified,
        length=length,
    )


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("bytes=0-499", [(0, 499)]),  # §14.1.2 examples
        ("bytes=500-999", [(500, 999)]),
        ("bytes=-500", [(None, 500)]),
        ("bytes=9500-", [(9500, None)]),
        ("bytes=0-0,-1", [(0, 0), (None, 1)]),
        ("bytes= 0-999, 4500-5499, -1000", [(0, 999), (4500, 5499), (None, 1000)]),
        ("bytes=500-600,601-999", [(500, 600), (601, 999)]),
        ("BYTES=1-2", [(1, 2)]),  # §14.1: range units are case-insensitive
        ("bytes=1-2,,", [(1, 2)]),  # §5.6.1: empty list elements are ignored
        (" bytes=1-2 ", [(1, 2)]),
        ("bytes=0-" + "9" * 40, [(0, 10**18)]),  # too long to be anywhere: past the end
        ("items=0-1", None),  # a unit this cache does not know
        ("bytes=", None),
        ("bytes=-", None),
        ("bytes=a-b", None),
        ("bytes=1-2-3", None),
        ("bytes=5-1", None),  # §14.1.1: last-pos before first-pos is invalid
        ("bytes=+1-2", None),
        ("bytes 0-1", None),
        ("bytes=0x1-2", None),
        ("bytes=1 - 2", None),
        ("", None),
    ],
)
def test_parse_range(value: str, expected: list[tuple[int | None, int | None]] | None) -> None:
    """RFC 9110 §14.1.1 ranges-specifier; None is a Range the cache ignores."""
    assert parse_range(value) == expected


def test_parse_range_bounds_the_number_of_ranges() -> None:
    """§14.2: a server may ignore a set of many ranges; more than MAX_RANGES are not read."""
    assert parse_range("bytes=" + ",".join(["0-0"] * MAX_RANGES)) is not None
    assert parse_range("bytes=" + ",".join(["0-0"] * (MAX_RANGES + 1))) is None


@given(st.text(max_size=60))
def test_parse_range_never_raises(value: str) -> None:
    """Any text is a list of valid ranges or None, never an exception."""
    specs = parse_range(value)
    assert specs is None or all(
        (first is None and last is not None) or (first is not None and (last or first) >= first)
        for first, last in specs
    )


@given(
    st.lists(st.tuples(st.integers(0, 200), st.integers(0, 200)), max_size=8),
    st.integers(0, 150),
)
def test_decisions_stay_within_the_representation(
    pairs: list[tuple[int, int]], length: int
) -> None:
    """Whatever the ranges, a 206 addresses bytes that exist, and a 416 says the length."""
    value = "bytes=" + ",".join(f"{min(a, b)}-{max(a, b)}" for a, b in pairs)
    decision = decide([value], length=length)
    if isinstance(decision, Part):
        assert 0 <= decision.first <= decision.last < length
    elif isinstance(decision, Unsatisfiable):
        assert decision.complete_length == length
        assert all(min(a, b) >= length for a, b in pairs)


@pytest.mark.parametrize(
    ("ranges", "length", "expected"),
    [
        (["bytes=0-99"], 10_000, Part(0, 99, 10_000)),
        (["bytes=100-"], 1000, Part(100, 999, 1000)),
        (["bytes=-100"], 1000, Part(900, 999, 1000)),
        (["bytes=-5000"], 1000, Part(0, 999, 1000)),  # §14.1.2: shorter than the suffix
        (["bytes=900-5000"], 1000, Part(900, 999, 1000)),  # last-pos cut to the end
        (["bytes=999-999"], 1000, Part(999, 999, 1000)),
        (["bytes=0-0"], 1, Part(0, 0, 1)),
        # §15.3.7.2: overlapping or adjacent ranges coalesced into one
        (["bytes=0-10,5-20"], 100, Part(0, 20, 100)),
        (["bytes=0-9,10-19"], 100, Part(0, 19, 100)),
        (["bytes=50-59,-50"], 100, Part(50, 99, 100)),
        # only the satisfiable ranges count (§14.1.1)
        (["bytes=0-9,5000-"], 100, Part(0, 9, 100)),
        # §15.5.17: none satisfiable
        (["bytes=1000-"], 1000, Unsatisfiable(1000)),
        (["bytes=1000-2000,3000-"], 1000, Unsatisfiable(1000)),
        (["bytes=-0"], 1000, Unsatisfiable(1000)),  # §14.1.1: a suffix of 0 is not
        (["bytes=0-0"], 0, Unsatisfiable(0)),
        # the Range is ignored, the whole 200 sent
        (["bytes=0-9,20-29"], 100, Whole("multiple")),  # no multipart/byteranges
        (["bytes=-1"], 0, Whole("empty")),
        (["bytes=0-1", "bytes=2-3"], 100, Whole("invalid")),
        (["bytes=2-1"], 100, Whole("invalid")),
        (["lines=1-2"], 100, Whole("invalid")),
        ([], 100, Whole("no-range")),
    ],
)
def test_decide_range(ranges: list[str], length: int, expected: RangeDecision) -> None:
    """RFC 9110 §14.2, §15.3.7, §15.5.17 on a whole 200 of ``length`` bytes."""
    assert decide(ranges, length=length) == expected


def test_content_range_fields() -> None:
    """§14.4: Content-Range of a part, and of a 416 (unsatisfied-range)."""
    assert Part(0, 99, 2048).content_range == "bytes 0-99/2048"
    assert Unsatisfiable(2048).content_range == "bytes */2048"


@pytest.mark.parametrize(
    ("method", "status", "expected"),
    [
        ("GET", 200, Part(0, 1, 10_000)),
        ("HEAD", 200, Whole("method")),  # §14.2: range handling is defined for GET only
        ("GET", 404, Whole("status")),  # §14.2: only where the answer would be a 200
        ("GET", 301, Whole("status")),
        ("GET", 304, Whole("status")),  # the client's own condition came first
        ("GET", 203, Whole("status")),
    ],
)
def test_range_applies_to_a_200_get_only(method: str, status: int, expected: RangeDecision) -> None:
    assert decide(["bytes=0-1"], method=method, status=status) == expected


@pytest.mark.parametrize(
    ("if_range", "etag", "last_modified", "holds"),
    [
        ('"v1"', '"v1"', None, True),  # §13.1.5: a strong match
        ('"v2"', '"v1"', None, False),
        ('W/"v1"', '"v1"', None, False),  # a weak tag never matches strongly (§8.8.3.2)
        ('"v1"', 'W/"v1"', None, False),
        ('"v1"', None, LAST_MODIFIED, False),  # no ETag to match
        (LAST_MODIFIED, '"v1"', LAST_MODIFIED, True),  # the date exactly
        ("Tue, 15 Nov 1994 08:12:32 GMT", None, LAST_MODIFIED, False),  # a second later
        ("Tue, 15 Nov 1994 08:12:30 GMT", None, LAST_MODIFIED, False),  # or earlier
        (LAST_MODIFIED, '"v1"', None, False),  # no Last-Modified to compare with
        ("yesterday", None, LAST_MODIFIED, False),  # not an HTTP-date
        ("", '"v1"', LAST_MODIFIED, False),
    ],
)
def test_if_range(if_range: str, etag: str | None, last_modified: str | None, holds: bool) -> None:
    """RFC 9110 §13.1.5: If-Range holds on a strong ETag match or the exact Last-Modified;
    when it does not, the Range is ignored and the whole 200 sent."""
    assert if_range_holds(if_range, etag=etag, last_modified=last_modified) is holds
    expected = Part(0, 1, 10_000) if holds else Whole("if-range")
    decision = decide(["bytes=0-1"], if_range=if_range, etag=etag, last_modified=last_modified)
    assert decision == expected


def test_a_failed_if_range_wins_over_an_unsatisfiable_range() -> None:
    """§13.2.2 step 5: If-Range is evaluated before the Range is applied: its failure means
    the whole 200, even when no range would have been satisfiable."""
    assert decide(["bytes=99999-"], if_range='"other"') == Whole("if-range")


@pytest.mark.parametrize(
    ("spans", "expected"),
    [
        ([], []),
        ([(5, 9), (0, 3)], [(0, 3), (5, 9)]),
        ([(0, 3), (4, 9)], [(0, 9)]),
        ([(0, 9), (2, 3)], [(0, 9)]),
        ([(3, 5), (0, 10), (20, 30)], [(0, 10), (20, 30)]),
    ],
)
def test_coalesced(spans: list[tuple[int, int]], expected: list[tuple[int, int]]) -> None:
    """§15.3.7.2: ranges that overlap or touch are sent as one."""
    assert coalesced(spans) == expected


@pytest.mark.slow
@pytest.mark.parametrize(
    ("ranges", "whole"),
    [
        # Decision 0031: only a Range whose answer is the whole object fills the cache.
        (["bytes=0-"], True),
        (["BYTES=0-"], True),
        (["bytes=0-, 5-9"], True),
        (["bytes=0-0"], False),  # the RangeAmp probe
        (["bytes=0-1"], False),
        (["bytes=100-"], False),
        (["bytes=-1"], False),
        (["bytes=0-1,5-6"], False),
        (["items=0-1"], True),  # ignored by the cache: the answer is the whole 200
        (["bytes=x"], True),
        (["bytes=0-0", "bytes=0-0"], True),  # sent twice: ignored
    ],
)
def test_fetches_whole(ranges: list[str], whole: bool) -> None:
    assert fetches_whole(ranges) is whole
