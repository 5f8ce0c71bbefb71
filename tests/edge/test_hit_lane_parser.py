"""The hit lane reads only what llhttp reads the same way (decision 0050): for any bytes the
lane takes as whole request heads, aiohttp's own parser (llhttp, set up as the edge's server
sets it up) reads the same requests, with the same method, target, version and fields, no
body, no upgrade, the connection kept open, and no error. Generated from a grammar of near-
valid heads (the mutations request smuggling is made of), and from raw bytes."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from typing import Any, cast

import pytest
from aiohttp import http_parser
from aiohttp.http import HttpVersion11
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.streams import EMPTY_PAYLOAD
from hypothesis import example, given, settings
from hypothesis import strategies as st

from proxy.core.http.lane import LaneHead, read_head


class _Protocol:
    transport = None

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...


def lane_reads(data: bytes) -> list[LaneHead] | None:
    """The heads the lane reads in ``data`` when it is whole heads and nothing else."""
    heads, start = [], 0
    while start < len(data):
        head = read_head(data, start)
        if head is None:
            return None
        heads.append(head)
        start = head.end
    return heads


# The parser's loop (for bodies' readers; no head here has one), made once, never run.
LOOP = asyncio.new_event_loop()


def teardown_module() -> None:
    LOOP.close()


def llhttp_reads(data: bytes) -> list[tuple[object, ...]]:
    parser = http_parser.HttpRequestParser(
        cast(Any, _Protocol()),
        LOOP,
        2**16,
        max_line_size=8190,
        max_field_size=8190,
        max_headers=128,
    )
    messages, upgraded, tail = parser.feed_data(data)
    assert not upgraded and tail == b""
    return [
        (
            message.method,
            message.path,
            message.version,
            [(name.decode().lower(), value.decode()) for name, value in message.raw_headers],
            message.should_close,
            message.upgrade,
            message.chunked,
            payload is EMPTY_PAYLOAD or payload.is_eof(),
        )
        for message, payload in messages
    ]


def check(data: bytes) -> None:
    heads = lane_reads(data)
    if heads is None:
        return  # the full path's: aiohttp reads it, lane on or off
    try:
        read = llhttp_reads(data)
    except HttpProcessingError as exc:  # pragma: no cover - the failure this test looks for
        pytest.fail(f"the lane read {data!r}, llhttp refused it: {exc}")
    assert read == [
        (
            head.method,
            head.target,
            HttpVersion11,
            list(head.fields.items()),
            False,
            False,
            False,
            True,
        )
        for head in heads
    ]


def test_the_edge_parses_with_llhttp() -> None:
    assert http_parser.HttpRequestParser is not http_parser.HttpRequestParserPy


PIECES = [
    b"GET",
    b"HEAD",
    b"get",
    b"POST",
    b" ",
    b"  ",
    b"\t",
    b"/",
    b"/a",
    b"?q=1",
    b"%2F",
    b"#",
    b'"',
    b"http://a",
    b"HTTP/1.1",
    b"HTTP/1.0",
    b"HTTP/1.11",
    b"\r\n",
    b"\n",
    b"\r",
    b"\x00",
    b"\x0b",
    b"\x7f",
    b"\xc3\xa9",
    b"Host",
    b"host",
    b"Content-Length",
    b"Transfer-Encoding",
    b"Connection",
    b"Upgrade",
    b"keep-alive",
    b"close",
    b"chunked",
    b":",
    b": ",
    b"example.com",
    b"0",
    b",",
]
VALID = b"GET /a HTTP/1.1\r\nHost: example.com\r\n\r\n"


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    """A valid head, then up to three pieces put in, in place of bytes or beside them."""
    data = bytearray(draw(st.sampled_from([VALID, VALID * 2, VALID[:-2] + b"A: b\r\n\r\n"])))
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(data)))
        cut = draw(st.integers(0, 3))
        data[at : at + cut] = draw(st.sampled_from(PIECES))
    return bytes(data)


# A longer run: LANE_EXAMPLES=100000 (the mutated heads; the raw tails get a third as many).
# Derandomized still, so that a run of N examples is the same run each time. Such a run may
# pass pytest-timeout's 300 s (it stopped one of 300,000 midway): it has no timeout.
EXAMPLES = int(os.environ.get("LANE_EXAMPLES", "3000"))
LONG_RUN = pytest.mark.timeout(0) if "LANE_EXAMPLES" in os.environ else pytest.mark.slow


@pytest.mark.slow
@LONG_RUN
@settings(max_examples=EXAMPLES, deadline=None, derandomize=True)
@given(mutated())
@example(VALID)
@example(b"GET /a HTTP/1.1\r\nHost: example.com\r\nConnection: keep-alive\r\n\r\n")
@example(b"HEAD /%41 HTTP/1.1\r\nhost:  a  \r\nX:\r\n\r\n")
def test_what_the_lane_reads_llhttp_reads_the_same_way(data: bytes) -> None:
    check(data)


@pytest.mark.slow
@LONG_RUN
@settings(max_examples=max(1, EXAMPLES // 3), deadline=None, derandomize=True)
@given(st.binary(max_size=64).map(lambda tail: VALID[:20] + tail))
def test_raw_bytes_after_a_valid_start(data: bytes) -> None:
    check(data)


def pieces_joined() -> Iterator[bytes]:
    """Every piece in every place of the valid head, once: the corpus's systematic part."""
    for at in range(len(VALID) + 1):
        for piece in PIECES:
            yield VALID[:at] + piece + VALID[at:]
            yield VALID[:at] + piece + VALID[at + 1 :]


def test_every_piece_in_every_place() -> None:
    for data in pieces_joined():
        check(data)
