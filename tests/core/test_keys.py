"""Request-targets and cache keys (RFC 9112 §3.2, RFC 9111 §2)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.core.cache.keys import cache_target, request_target, scheme_targets, target_of

DOMAIN = "example.com"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        # origin-form (§3.2.1): taken exactly as sent, nothing decoded or normalised, but an
        # empty query, which the origin is not sent (its client's URL has none)
        ("/", "/"),
        ("/a/b?x=1&y", "/a/b?x=1&y"),
        ("/a%2fb", "/a%2fb"),
        ("/a%2Fb", "/a%2Fb"),
        ("/a/../b", "/a/../b"),
        ("/a?", "/a"),
        ("/a??", "/a??"),
        ("/a?x?", "/a?x?"),
        # absolute-form (§3.2.2) on the Host's own domain: its path and query
        ("http://example.com/p?q", "/p?q"),
        ("https://example.com/p", "/p"),
        ("HTTP://EXAMPLE.com:443/p", "/p"),
        ("http://example.com./p%2fq", "/p%2fq"),
        ("http://example.com", "/"),
        ("http://example.com?x", "/?x"),
        ("http://example.com/p?", "/p"),
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
    """Property: any origin-form target comes back byte for byte, but a lone "?" at its end
    (an empty query: the origin is sent the target without it)."""
    target = "/" + path
    empty_query = target.endswith("?") and target.count("?") == 1
    assert request_target(target, DOMAIN) == (target[:-1] if empty_query else target)


@pytest.mark.slow
@given(st.text())
def test_request_target_never_raises(raw: str) -> None:
    """Property: any request-target gives None or an origin-form target."""
    target = request_target(raw, DOMAIN)
    assert target is None or target.startswith("/")


# -- the scheme in the key (RFC 9111 §2; issue 30 item 2, decision 0041) -----------------------


@pytest.mark.parametrize(
    "raw",
    ["/p https", "/p%20https", "/p\thttps", "/p\x00https", "/https:/p", "https:/p", "/p https "],
)
def test_no_http_request_target_spells_the_https_key_of_another(raw: str) -> None:
    """An http request whose target is ``/p https`` (or any other spelling) has a key of its
    own: never the https key of ``/p``, whose scheme is a field no target can fill."""
    target = request_target(raw, DOMAIN)
    if target is None:
        return  # refused: keyed never
    assert cache_target(target, False) not in {cache_target("/p", True), cache_target(raw, True)}
    assert cache_target(target, False) == target  # a plain-HTTP key is the target as it is


@given(st.text(), st.text(), st.booleans(), st.booleans())
def test_key_targets_of_different_requests_never_meet(
    first: str, second: str, https_first: bool, https_second: bool
) -> None:
    """Two requests' key targets are equal only when both their request-targets and their
    schemes are; and each gives back its request-target (purges name request-targets)."""
    a = request_target("/" + first, DOMAIN)
    b = request_target("/" + second, DOMAIN)
    assert a is not None and b is not None
    key_a, key_b = cache_target(a, https_first), cache_target(b, https_second)
    assert (key_a == key_b) == (a == b and https_first == https_second)
    assert target_of(key_a) == a and target_of(key_b) == b
    assert key_a in scheme_targets(a)
    assert scheme_targets(a)[https_first] == key_a
