"""Which requests the cache may answer, and which a fresh stored response answers as stored.

The edge's full path and its fast path both ask these (proxy/core/http/requests.py)."""

from __future__ import annotations

import pytest
from multidict import CIMultiDict

from proxy.core.http.requests import may_use_cache, plain_get


@pytest.mark.parametrize(
    ("method", "fields", "has_body", "expected"),
    [
        ("GET", {}, False, True),
        ("HEAD", {}, False, True),  # answered from the stored GET (RFC 9111 §4)
        ("GET", {"Cache-Control": "no-cache"}, False, True),  # weighed by the lookup rules
        # Answered from the whole stored response (core/ranges.py); off the fast path below.
        ("GET", {"range": "bytes=0-1"}, False, True),
        ("GET", {}, True, False),  # a body the cache would not key on
        ("POST", {}, False, False),  # §9.3.3 of RFC 9110: not stored here
        ("PUT", {}, False, False),
        ("OPTIONS", {}, False, False),
        ("get", {}, False, False),  # methods are case-sensitive (RFC 9110 §9.1)
    ],
)
def test_may_use_cache(method: str, fields: dict[str, str], has_body: bool, expected: bool) -> None:
    """RFC 9111 §2, §4: only GET and HEAD without a body are looked up."""
    assert may_use_cache(method, CIMultiDict(fields), has_body=has_body) is expected


@pytest.mark.slow
@pytest.mark.parametrize(
    ("method", "fields", "has_body", "expected"),
    [
        ("GET", {}, False, True),
        ("GET", {"Accept": "*/*", "User-Agent": "x"}, False, True),
        ("GET", {"cache-control": "max-age=0"}, False, False),  # §5.2.1 directives
        ("GET", {"Pragma": "no-cache"}, False, False),  # §5.4
        ("GET", {"If-None-Match": '"a"'}, False, False),  # RFC 9110 §13.1.2: may be a 304
        ("GET", {"IF-MODIFIED-SINCE": "Thu, 01 Jan 1970 00:00:00 GMT"}, False, False),
        ("GET", {"Range": "bytes=0-1"}, False, False),
        ("GET", {}, True, False),
        ("HEAD", {}, False, False),  # no body to send: the full path answers it
    ],
)
def test_plain_get(method: str, fields: dict[str, str], has_body: bool, expected: bool) -> None:
    """A plain GET is one a fresh stored response answers exactly as stored; the fields are
    found whatever their case."""
    assert plain_get(method, CIMultiDict(fields), has_body=has_body) is expected
