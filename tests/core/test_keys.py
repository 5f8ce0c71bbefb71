"""Request-targets and cache keys (RFC 9112 §3.2, RFC 9111 §2)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.core.cache.keys import request_target

DOMAIN = "example.com"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        # origin-form (§3.2.1): taken exactly as sent, nothing decoded or normalised
        ("/", "/"),
        ("/a/b?x=1&y", "/a/b?x=1&y"),
        ("/a%2fb", "/a%2fb"),
        ("/a%2Fb", "/a%2Fb"),
        ("/a/../b", "/a/../b"),
        ("/a?", "/a?"),
        # absolute-form (§3.2.2) on the Host's own domain: its path and query
        ("http://example.com/p?q", "/p?q"),
        ("https://example.com/p", "/p"),
        ("HTTP://EXAMPLE.com:443/p", "/p"),
        ("http://example.com./p%2fq", "/p%2fq"),
        ("http://example.com", "/"),
        ("http://example.com?x", "/?x"),
        # refused: other authorities, other forms, junk
        ("http://other.com/p", None),
        ("http://example.com.evil/p", None),
        ("http://user@example.com/p", None),
        ("ftp://example.com/p", None),
        ("*", None),  # asterisk-form (§3.2.4)
        ("example.com:443", None),  # authority-form (§3.2.3)
        ("", None),
        ("p", None),
    ],
)
def test_request_target(raw: str, expected: str | None) -> None:
    """RFC 9112 §3.2: the target keyed and forwarded, or None if not acceptable."""
    assert request_target(raw, DOMAIN) == expected


@given(st.text())
def test_origin_form_is_kept_verbatim(path: str) -> None:
    """Property: any origin-form target comes back byte for byte."""
    assert request_target("/" + path, DOMAIN) == "/" + path


@pytest.mark.slow
@given(st.text())
def test_request_target_never_raises(raw: str) -> None:
    """Property: any request-target gives None or an origin-form target."""
    target = request_target(raw, DOMAIN)
    assert target is None or target.startswith("/")
