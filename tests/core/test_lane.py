"""The hit lane's reading of request heads (proxy/core/http/lane.py, decision 0050): a strict
subset of RFC 9112 §3 and §5, and anything outside it left to the full path (None)."""

from __future__ import annotations

import pytest
from multidict import CIMultiDict, CIMultiDictProxy

from proxy.core.http.lane import MAX_HEAD, Fields, fast_hit, read_head

H = b"Host: example.com\r\n"


def head(line: bytes, *fields: bytes) -> bytes:
    return line + b"\r\n" + b"".join(f + b"\r\n" for f in fields) + b"\r\n"


READ = [
    (head(b"GET / HTTP/1.1", H.strip()), "GET", "/", {"host": "example.com"}),
    (head(b"HEAD /a?b=c HTTP/1.1", H.strip()), "HEAD", "/a?b=c", {"host": "example.com"}),
    (
        head(b"GET /a HTTP/1.1", b"Host:example.com", b"User-Agent: \t x y \t"),
        "GET",
        "/a",
        {"host": "example.com", "user-agent": "x y"},
    ),
    (
        head(b"GET /%41;x=1@:$ HTTP/1.1", b"HOST: a", b"Connection: Keep-Alive"),
        "GET",
        "/%41;x=1@:$",
        {"host": "a", "connection": "Keep-Alive"},
    ),
    (head(b"GET /a HTTP/1.1", H.strip(), b"X-Empty:"), "GET", "/a", None),
]


@pytest.mark.parametrize(("data", "method", "target", "fields"), READ)
def test_heads_of_the_subset_are_read(
    data: bytes, method: str, target: str, fields: dict[str, str] | None
) -> None:
    read = read_head(data)
    assert read is not None
    assert (read.method, read.target, read.end) == (method, target, len(data))
    if fields is not None:
        assert dict(read.fields) == fields
    assert read.host == read.fields["host"]


REFUSED = {
    "incomplete": b"GET / HTTP/1.1\r\nHost: a\r\n",
    "no-fields": b"GET / HTTP/1.1\r\n\r\n",
    "no-host": head(b"GET / HTTP/1.1", b"Accept: */*"),
    "empty-host": head(b"GET / HTTP/1.1", b"Host: "),
    "two-hosts": head(b"GET / HTTP/1.1", H.strip(), H.strip()),
    "any-field-twice": head(b"GET / HTTP/1.1", H.strip(), b"A: 1", b"a: 2"),
    "post": head(b"POST / HTTP/1.1", H.strip()),
    "options": head(b"OPTIONS / HTTP/1.1", H.strip()),
    "lower-case-method": head(b"get / HTTP/1.1", H.strip()),
    "http-1.0": head(b"GET / HTTP/1.0", H.strip()),
    "http-0.9": b"GET /\r\n\r\n",
    "absolute-form": head(b"GET http://a/ HTTP/1.1", H.strip()),
    "asterisk": head(b"GET * HTTP/1.1", H.strip()),
    "space-in-target": head(b"GET /a b HTTP/1.1", H.strip()),
    "quote-in-target": head(b'GET /a" HTTP/1.1', H.strip()),
    "fragment": head(b"GET /a#b HTTP/1.1", H.strip()),
    "two-spaces": head(b"GET  / HTTP/1.1", H.strip()),
    "trailing-space": head(b"GET / HTTP/1.1 ", H.strip()),
    "content-length": head(b"GET / HTTP/1.1", H.strip(), b"Content-Length: 0"),
    "transfer-encoding": head(b"GET / HTTP/1.1", H.strip(), b"Transfer-Encoding: chunked"),
    "upgrade": head(b"GET / HTTP/1.1", H.strip(), b"Upgrade: websocket"),
    "expect": head(b"GET / HTTP/1.1", H.strip(), b"Expect: 100-continue"),
    "connection-close": head(b"GET / HTTP/1.1", H.strip(), b"Connection: close"),
    "connection-option": head(b"GET / HTTP/1.1", H.strip(), b"Connection: keep-alive, x"),
    "obs-fold": head(b"GET / HTTP/1.1", H.strip(), b"A: b", b" c"),
    "space-before-colon": head(b"GET / HTTP/1.1", b"Host : a"),
    "bare-lf": b"GET / HTTP/1.1\nHost: a\r\n\r\n",
    "bare-lf-field": b"GET / HTTP/1.1\r\nHost: a\n\r\n",
    "bare-cr": head(b"GET / HTTP/1.1", H.strip(), b"A: b\rc"),
    "nul": head(b"GET / HTTP/1.1", H.strip(), b"A: \x00"),
    "control": head(b"GET / HTTP/1.1", H.strip(), b"A: \x1b"),
    "del": head(b"GET / HTTP/1.1", H.strip(), b"A: \x7f"),
    "obs-text": head(b"GET / HTTP/1.1", H.strip(), b"A: \xe9"),
    "name-not-token": head(b"GET / HTTP/1.1", H.strip(), b"A(b): c"),
    "leading-crlf": b"\r\n" + head(b"GET / HTTP/1.1", H.strip()),
    "too-long": head(b"GET / HTTP/1.1", H.strip(), b"A: " + b"a" * MAX_HEAD),
    "too-many-fields": head(b"GET / HTTP/1.1", H.strip(), *(b"X-%d: v" % n for n in range(100))),
}


@pytest.mark.parametrize("data", list(REFUSED.values()), ids=list(REFUSED))
def test_anything_else_is_left_to_the_full_path(data: bytes) -> None:
    assert read_head(data) is None


def test_heads_are_read_one_after_another() -> None:
    first = head(b"GET /a HTTP/1.1", H.strip())
    second = head(b"GET /b HTTP/1.1", H.strip())
    one = read_head(first + second)
    assert one is not None and one.end == len(first)
    two = read_head(first + second, one.end)
    assert two is not None and two.target == "/b" and two.end == len(first + second)


PLAIN = [
    ({}, True),
    ({"cache-control": "max-age=0"}, False),
    ({"pragma": "no-cache"}, False),
    ({"if-none-match": '"a"'}, False),
    ({"if-modified-since": "x"}, False),
    ({"range": "bytes=0-1"}, False),
    ({"upgrade": "x"}, False),
    ({"accept": "*/*", "cookie": "a=1"}, True),
]


@pytest.mark.parametrize(("extra", "expected"), PLAIN)
def test_the_lane_and_the_fast_path_ask_one_question(extra: dict[str, str], expected: bool) -> None:
    """``fast_hit`` gives the same answer for the lane's fields and for aiohttp's header
    mapping of the same request (the handler's fast path)."""
    items = [("host", "a"), *extra.items()]
    lane = Fields(items)
    full = CIMultiDictProxy(CIMultiDict([(name.title(), value) for name, value in items]))
    for method in ("GET", "HEAD"):
        for keep_alive in (True, False):
            for early_hints in (True, False):
                answers = {
                    fast_hit(
                        method,
                        fields,
                        keep_alive=keep_alive,
                        has_body=False,
                        early_hints=early_hints,
                    )
                    for fields in (lane, full)
                }
                want = expected and method == "GET" and keep_alive and not early_hints
                assert answers == {want}
