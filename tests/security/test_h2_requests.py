"""What an HTTP/2 request must look like to reach the cache and an origin (issue 30, holes 2,
3 and 5; decision 0044), seen from a raw origin that records every byte it is sent.

- a method is a token, and one the edge takes on HTTP/1.1 too (llhttp's list): ``get`` is
  answered 400 on both protocols, never forwarded as an unknown, unsafe method that aiohttp's
  client sends as ``GET`` and whose success evicts the URL for everyone;
- a ``:path`` is origin-form of visible ASCII but '#', as nghttp2 and nginx hold it: a space,
  a tab, a control, a byte past 0x7f or a fragment resets the stream; what passes reaches the
  origin as the very bytes the cache key holds;
- a field value has no control but HTAB, and past ASCII it is UTF-8: what passes is sent on
  byte for byte, and what aiohttp's client could not send never gets that far (the stream was
  answered 500, with a traceback logged each time).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator

import pytest
from aiohttp.base_protocol import BaseProtocol
from aiohttp.http_exceptions import BadHttpMethod, BadStatusLine
from aiohttp.http_parser import HttpRequestParser
from h2.errors import ErrorCodes
from hypothesis import example, given, settings
from hypothesis import strategies as st

from proxy.core.cache.keys import HTTPS_MARK, target_of
from proxy.core.http.requests import METHODS, is_token
from proxy.process.service import Service
from proxy.store.memory import MemoryStore
from proxy.store.tiered import TieredStore
from tests.edge.h2_support import Answer, RawH2
from tests.security.support import RawOrigin, exchange


@pytest.fixture
def h2_client(h2_client: RawH2) -> RawH2:
    """Sends what it is told: h2 as a client would refuse (or fix) what an attacker sends."""
    h2_client.h2.config.validate_outbound_headers = False
    h2_client.h2.config.normalize_outbound_headers = False
    return h2_client


def raw_request(
    h2_client: RawH2, method: bytes, path: bytes, fields: list[tuple[bytes, bytes]] | None = None
) -> int:
    stream_id = h2_client.h2.get_next_available_stream_id()
    head = [
        (b":method", method),
        (b":path", path),
        (b":scheme", b"https"),
        (b":authority", b"example.com"),
        *(fields or []),
    ]
    h2_client.h2.send_headers(stream_id, head, end_stream=True)
    h2_client.answers[stream_id] = Answer()
    h2_client.flush()
    return stream_id


def stored_targets(store: MemoryStore | TieredStore) -> list[str]:
    """The request-targets the store's keys were made from (whatever marks their scheme)."""
    targets = []
    for key, _ in store.items():  # type: ignore[union-attr]
        [target] = [
            part
            for part in key
            if isinstance(part, str) and (part[:1] in "/*" or part.startswith(HTTPS_MARK))
        ]
        targets.append(target_of(target))
    return targets


async def http11(tls_service: Service, method: bytes, target: bytes = b"/p") -> int:
    assert tls_service.edge_url is not None
    request = (
        method + b" " + target + b" HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n"
    )
    answer = await exchange(tls_service.edge_url, request)
    [status] = answer.statuses
    return status


# -- methods (hole 3) -------------------------------------------------------------------------

# Every name in llhttp's HTTP_ALL_METHOD_MAP, the RTSP ones included (refused in HTTP).
LLHTTP_NAMES = [
    *("DELETE", "GET", "HEAD", "POST", "PUT", "CONNECT", "OPTIONS", "TRACE", "COPY", "LOCK"),
    *("MKCOL", "MOVE", "PROPFIND", "PROPPATCH", "SEARCH", "UNLOCK", "BIND", "REBIND"),
    *("UNBIND", "ACL", "REPORT", "MKACTIVITY", "CHECKOUT", "MERGE", "M-SEARCH", "NOTIFY"),
    *("SUBSCRIBE", "UNSUBSCRIBE", "PATCH", "PURGE", "MKCALENDAR", "LINK", "UNLINK", "SOURCE"),
    *("PRI", "DESCRIBE", "ANNOUNCE", "SETUP", "PLAY", "PAUSE", "TEARDOWN", "GET_PARAMETER"),
    *("SET_PARAMETER", "REDIRECT", "RECORD", "FLUSH", "QUERY"),
]


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    made = asyncio.new_event_loop()
    yield made
    made.close()


def http11_takes(loop: asyncio.AbstractEventLoop, method: bytes) -> bool:
    """Whether the edge's HTTP/1.1 parser (aiohttp's, on llhttp) reads ``method``."""
    parser = HttpRequestParser(BaseProtocol(loop), loop, 2**16)
    target = b"a:1" if method == b"CONNECT" else b"/"
    try:
        parser.feed_data(method + b" " + target + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    except (BadHttpMethod, BadStatusLine):
        return False
    return True


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.sampled_from(LLHTTP_NAMES).map(str.encode),
        st.sampled_from(LLHTTP_NAMES).map(lambda name: name.lower().encode()),
        st.from_regex(rb"\A[!-~]{1,10}\Z"),
    )
)
@example(b"get")
@example(b"G@T")
@example(b"M~")
def test_http2_takes_exactly_the_methods_http11_takes(
    loop: asyncio.AbstractEventLoop, method: bytes
) -> None:
    """One rule for both protocols: core's METHODS is llhttp's list, every one of them upper
    case (so aiohttp's client sends the method judged)."""
    h2_takes = is_token(method) and method.decode() in METHODS
    assert h2_takes == http11_takes(loop, method)
    assert method.upper() == method or not h2_takes


@pytest.mark.parametrize(
    ("method", "h2_reset"),
    [
        (b"get", False),  # a token, but not a method the edge takes: HTTP/1.1's 400
        (b"Get", False),
        (b"BREW", False),
        (b"G T", True),  # not a token: malformed (RFC 9113 §8.1.1), the stream is reset
        (b"GE\x0bT", True),
        (b"GET ", True),
    ],
    ids=["lower", "mixed", "unknown", "space", "vt", "trailing-space"],
)
async def test_a_method_the_edge_does_not_take_never_reaches_the_origin_nor_evicts(
    h2_client: RawH2, tls_service: Service, raw_server: RawOrigin, method: bytes, h2_reset: bool
) -> None:
    """The issue's attack: ``:method: get`` was forwarded as unknown (so unsafe), sent as
    GET by aiohttp's client, answered 200, and the URL was evicted for everyone. Both
    protocols now refuse the method, and the stored answer keeps being served."""
    filled = await h2_client.answer(h2_client.request("/p"))
    assert (filled.status, filled.body) == (200, b"answer for /p")
    answer = await h2_client.answer(raw_request(h2_client, method, b"/p"))
    if h2_reset:
        assert (answer.status, answer.reset) == (0, ErrorCodes.PROTOCOL_ERROR)
    else:
        assert answer.status == 400 and answer.body.startswith(b"400 Bad Request")
    if not method.endswith(b" "):  # in HTTP/1.1 a space ends the method
        assert await http11(tls_service, method) == 400
    again = await h2_client.answer(h2_client.request("/p"))
    assert (again.status, again.body) == (200, b"answer for /p")
    assert [r.head.split(b" ")[0] for r in raw_server.requests] == [b"GET"]  # the fill alone


async def test_a_method_the_edge_takes_is_sent_as_it_was_judged(
    h2_client: RawH2, raw_server: RawOrigin
) -> None:
    answer = await h2_client.answer(raw_request(h2_client, b"PURGE", b"/p"))
    assert answer.status == 200
    [forwarded] = raw_server.requests
    assert forwarded.head.startswith(b"PURGE /p HTTP/1.1\r\n")


# -- targets (hole 2) -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        b"/a b",
        b"/c/x HTTP/1.0",
        b"/a\tb",
        b"/a\x01b",
        b"/a\x7fb",
        b"/caf\xc3\xa9",
        b"/a#frag",
        b"/p https",  # the https key's suffix, spelled by a path
        b"http://example.com/a",  # absolute-form: never in :path (RFC 9113 §8.3.1)
        b"a",
        b"*",  # only OPTIONS may ask for '*'
    ],
    ids=[
        "space",
        "request-line",
        "tab",
        "control",
        "del",
        "utf-8",
        "fragment",
        "https-mark",
        "absolute",
        "no-slash",
        "asterisk",
    ],
)
async def test_a_path_with_characters_no_target_may_have_resets_the_stream(
    h2_client: RawH2, raw_server: RawOrigin, path: bytes
) -> None:
    answer = await h2_client.answer(raw_request(h2_client, b"GET", path))
    assert (answer.status, answer.reset) == (0, ErrorCodes.PROTOCOL_ERROR)
    after = await h2_client.answer(h2_client.request("/after"))
    assert after.status == 200  # a stream error: the connection lives
    assert [r.target for r in raw_server.requests] == ["/after"]


@pytest.mark.parametrize(
    "path",
    [
        "/a",
        '/a"b<c>',
        "/a|b^c`d{e}[f]\\g",
        "/%zz/%2e%2e/",
        "/a/../b/./c//d",
        "/a;b=c?x=1&&y=%20&z=a?b",
        "/a??",
    ],
)
async def test_the_origin_is_sent_the_target_the_key_holds(
    h2_client: RawH2, tls_service: Service, raw_server: RawOrigin, path: str
) -> None:
    answer = await h2_client.answer(raw_request(h2_client, b"GET", path.encode()))
    assert answer.status == 200
    [forwarded] = raw_server.requests
    assert forwarded.target == path
    assert stored_targets(tls_service.store) == [path]


async def test_an_empty_query_is_keyed_as_the_origin_is_asked(
    h2_client: RawH2, tls_service: Service, raw_server: RawOrigin
) -> None:
    """The origin client sends ``/a?`` as ``/a`` (its URL has no empty query), so the key is
    ``/a`` too: one entry for what the origin cannot tell apart, never a key naming bytes the
    origin was not sent."""
    for path in (b"/a?", b"/a"):
        answer = await h2_client.answer(raw_request(h2_client, b"GET", path))
        assert answer.status == 200
    assert [r.target for r in raw_server.requests] == ["/a"]
    assert stored_targets(tls_service.store) == ["/a"]


# -- field values (hole 5) --------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [b"a\x0bb", b"a\x7fb", b"a\x1bb", b"caf\xe9"],
    ids=["vt", "del", "esc", "latin-1"],
)
async def test_a_value_http11_cannot_carry_resets_the_stream_with_no_traceback(
    h2_client: RawH2, raw_server: RawOrigin, caplog: pytest.LogCaptureFixture, value: bytes
) -> None:
    """A VT or DEL passed the head check, aiohttp's client raised, the stream got a 500 and
    3.6 KB of traceback were logged each time."""
    caplog.set_level(logging.WARNING)
    for _ in range(3):
        answer = await h2_client.answer(raw_request(h2_client, b"GET", b"/v", [(b"x-a", value)]))
        assert (answer.status, answer.reset) == (0, ErrorCodes.PROTOCOL_ERROR)
    assert raw_server.requests == []
    assert [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR] == []


async def test_utf8_and_tabs_in_values_reach_the_origin_byte_for_byte(
    h2_client: RawH2, raw_server: RawOrigin
) -> None:
    value = "café\tnaïve".encode()
    answer = await h2_client.answer(raw_request(h2_client, b"GET", b"/u", [(b"x-a", value)]))
    assert answer.status == 200
    [forwarded] = raw_server.requests
    assert b"\r\nx-a: " + value + b"\r\n" in forwarded.head
