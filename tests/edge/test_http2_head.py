"""An HTTP/2 request head read as the edge reads an HTTP/1.1 one (proxy/edge/h2/head.py,
RFC 9113 §8.3)."""

from __future__ import annotations

import pytest

from proxy.edge.h2.head import read_head

BASE = [(b":method", b"GET"), (b":scheme", b"https"), (b":path", b"/a?b=1")]


def test_authority_is_the_host_and_cookie_crumbs_are_one_cookie() -> None:
    """§8.3.1: :authority is the Host, over a Host field; §8.2.3: crumbs joined by "; "."""
    fields = [
        *BASE,
        (b":authority", b"example.com"),
        (b"host", b"other.test"),
        (b"cookie", b"a=1"),
        (b"accept", b"*/*"),
        (b"cookie", b"b=2"),
    ]
    head = read_head(fields)
    assert (head.method, head.path) == ("GET", "/a?b=1")
    assert head.headers.getall("Host") == ["example.com"]
    assert head.headers.getall("Cookie") == ["a=1; b=2"]
    assert head.raw == ((b"host", b"other.test"), (b"accept", b"*/*"), (b"cookie", b"a=1; b=2"))


def test_without_authority_the_host_field_routes() -> None:
    head = read_head([*BASE, (b"host", b"example.com")])
    assert head.headers["Host"] == "example.com"


@pytest.mark.parametrize(
    ("method", "path", "served"),
    [
        ("GET", "/", True),
        ("OPTIONS", "*", True),
        ("CONNECT", "", False),  # CONNECT, extended (WebSocket over HTTP/2) or not
        ("CONNECT", "/chat", False),
        ("GET", "http://example.com/", False),  # not origin-form
        ("GET", "", False),
    ],
)
def test_what_the_edge_serves(method: str, path: str, served: bool) -> None:
    fields = [(b":method", method.encode()), (b":authority", b"example.com")]
    if path:
        fields.append((b":path", path.encode()))
    assert read_head(fields).served is served
