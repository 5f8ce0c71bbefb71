"""The edge's HTTP/2 state machine (proxy/edge/h2/machine.py, decision 0036), sans I/O,
against RFC 9113: the h2 library plays the client for what a real client sends, hyperframe
and hpack build the frames no client library would send."""

from __future__ import annotations

import contextlib

import pytest
from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.errors import ErrorCodes
from h2.events import DataReceived as ClientData
from h2.events import ResponseReceived
from h2.settings import SettingCodes
from hpack import Decoder, Encoder, HeaderTuple, NeverIndexedHeaderTuple
from hyperframe.frame import (
    ContinuationFrame,
    DataFrame,
    Frame,
    HeadersFrame,
    PingFrame,
    PriorityFrame,
    PushPromiseFrame,
    RstStreamFrame,
    SettingsFrame,
    WindowUpdateFrame,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.edge.h2.events import (
    DataReceived,
    GoneAway,
    H2Error,
    RequestReceived,
    ServerReset,
    StreamEnded,
    StreamRefused,
    WindowOpened,
)
from proxy.edge.h2.frames import PREFACE, encode_block
from proxy.edge.h2.limits import H2Limits
from proxy.edge.h2.machine import ServerMachine

GET = [(":method", "GET"), (":path", "/a"), (":scheme", "https"), (":authority", "example.com")]


def connected(**limits: int) -> tuple[ServerMachine, H2Connection]:
    """A server machine and an h2 client past both prefaces."""
    server = ServerMachine(H2Limits(**limits))
    server.initiate()
    client = H2Connection(H2Configuration(client_side=True, header_encoding=None))
    client.initiate_connection()
    server.receive(client.data_to_send())
    client.receive_data(server.data_to_send())
    server.receive(client.data_to_send())  # its SETTINGS ACK
    server.data_to_send()
    server.control = 0
    return server, client


def raw(*frames: Frame) -> bytes:
    return b"".join(frame.serialize() for frame in frames)


def block(fields: list[tuple[str, str]]) -> bytes:
    return bytes(Encoder().encode(fields))


# -- what a client sends, and what it reads back --------------------------------------------


def test_a_request_and_its_answer_through_a_real_client() -> None:
    server, client = connected()
    client.send_headers(1, [*GET, ("cookie", "a=1"), ("cookie", "b=2")], end_stream=True)
    events = server.receive(client.data_to_send())
    assert len(events) == 1 and isinstance(events[0], RequestReceived)
    head = events[0].head
    assert (head.method, head.path, events[0].ended) == ("GET", "/a", True)
    assert head.headers["Host"] == "example.com" and head.headers["Cookie"] == "a=1; b=2"
    fields = [(b":status", b"200"), (b"content-type", b"text/plain"), (b"x-own", b"yes")]
    server.send_headers(1, encode_block(fields))
    server.send_data(1, b"hello", end=True)
    answer = client.receive_data(server.data_to_send())
    response = next(e for e in answer if isinstance(e, ResponseReceived))
    assert response.headers == fields
    assert b"".join(e.data for e in answer if isinstance(e, ClientData)) == b"hello"
    assert server.open_streams == 0


def test_a_smaller_header_table_gets_a_size_update_and_a_long_head_continues() -> None:
    """A client that shrinks its HPACK table (nghttp2 then waits for a size update) and an
    answer's head past one frame (CONTINUATION)."""
    server, client = connected()
    client.update_settings({SettingCodes.HEADER_TABLE_SIZE: 0})
    server.receive(client.data_to_send())
    client.receive_data(server.data_to_send())  # the ACK
    client.send_headers(1, GET, end_stream=True)
    server.receive(client.data_to_send())
    fields = [(b":status", b"200"), (b"x-long", b"v" * 40_000)]
    server.send_headers(1, encode_block(fields), end=True)
    out = server.data_to_send()
    assert out[3] == 0x1 and out[9] == 0x20  # HEADERS, opening with a size update to 0
    response = next(e for e in client.receive_data(out) if isinstance(e, ResponseReceived))
    assert response.headers == fields


def test_windows_follow_settings_and_window_updates() -> None:
    server, client = connected()
    client.update_settings({SettingCodes.INITIAL_WINDOW_SIZE: 10})
    client.send_headers(1, GET, end_stream=True)
    events = server.receive(client.data_to_send())
    assert WindowOpened(0) in events
    assert server.window(1) == 10
    with pytest.raises(ValueError):
        server.send_data(1, b"x" * 11, end=False)
    server.send_data(1, b"x" * 10, end=False)
    assert server.window(1) == 0
    assert server.receive(raw(WindowUpdateFrame(1, window_increment=5))) == [WindowOpened(1)]
    assert server.window(1) == 5


def test_a_stream_past_the_concurrent_limit_is_refused() -> None:
    server, _ = connected(max_concurrent_streams=2)
    heads = [HeadersFrame(i, data=block(GET), flags={"END_HEADERS"}) for i in (1, 3, 5)]
    events = server.receive(raw(*heads))
    assert [type(e) for e in events] == [RequestReceived, RequestReceived, StreamRefused]
    assert server.data_to_send() == raw(RstStreamFrame(5, error_code=ErrorCodes.REFUSED_STREAM))
    server.send_headers(1, encode_block([(b":status", b"204")]), end=True)  # one answered...
    server.receive(raw(DataFrame(1, flags={"END_STREAM"})))  # ... and ended: closed
    again = HeadersFrame(7, data=block(GET), flags={"END_HEADERS"})
    assert [type(e) for e in server.receive(raw(again))] == [RequestReceived]


def test_a_body_and_its_end() -> None:
    server, client = connected()
    client.send_headers(1, [*GET, ("content-length", "3")])
    client.send_data(1, b"abc", end_stream=True)
    events = server.receive(client.data_to_send())
    assert events[1:] == [DataReceived(1, b"abc", 3), StreamEnded(1)]


@pytest.mark.parametrize(
    ("lengths", "body"),
    [
        (["57"], None),  # HEADERS with END_STREAM: no body behind the claim
        (["5"], b"hell"),
        (["5", "5"], b"hello"),  # repeated, even equal
        (["5", "6"], b"hello"),
        (["9" * 5000], b"hello"),  # past int()'s digit limit: refused before reading it
        (["1" * 19], b"hello"),
        (["-5"], b"hello"),
    ],
    ids=["ended-head", "short", "repeated", "differing", "5000-digits", "19-digits", "sign"],
)
def test_a_length_the_frames_do_not_carry_is_malformed(
    lengths: list[str], body: bytes | None
) -> None:
    """RFC 9113 §8.1.1: a content-length that differs from the DATA is malformed, the
    stream ended by HEADERS included (issue 30, hole 1); no request is ever reported for
    it, or its end is never (so nothing is sent on with the claim)."""
    server, _ = connected()
    fields = [*GET, *(("content-length", value) for value in lengths)]
    frames: list[Frame] = [HeadersFrame(1, data=block(fields), flags={"END_HEADERS", "END_STREAM"})]
    if body is not None:
        frames = [
            HeadersFrame(1, data=block(fields), flags={"END_HEADERS"}),
            DataFrame(1, data=body, flags={"END_STREAM"}),
        ]
    events = server.receive(raw(*frames))
    assert ServerReset(1, ErrorCodes.PROTOCOL_ERROR) in events
    assert StreamEnded(1) not in events
    assert all(not (isinstance(e, RequestReceived) and e.ended) for e in events)
    # The connection lives: the next stream is a request.
    after = server.receive(raw(HeadersFrame(3, data=block(GET), flags={"END_HEADERS"})))
    assert [type(e) for e in after] == [RequestReceived]


def test_a_zero_length_on_a_head_that_ends_the_stream_is_a_request() -> None:
    server, _ = connected()
    fields = [*GET, ("content-length", "0")]
    events = server.receive(
        raw(HeadersFrame(1, data=block(fields), flags={"END_HEADERS", "END_STREAM"}))
    )
    [event] = events
    assert isinstance(event, RequestReceived) and event.ended


# -- the head cache --------------------------------------------------------------------------


def test_a_repeated_block_means_what_the_table_says_now() -> None:
    """The same bytes after the client's table changed must be decoded again: a reference
    decoder fed the same blocks gives the paths the machine must give."""
    server, _ = connected()
    encoder, reference = Encoder(), Decoder()
    first = bytes(encoder.encode(GET))  # literals, indexed into the table
    again = bytes(encoder.encode(GET))  # indices only: the table is unchanged by it
    other = bytes(encoder.encode([*GET[:1], (":path", "/b"), *GET[2:]]))  # inserts /b
    blocks = [first, again, again, other, again]
    stream_id = 1
    for data in blocks:
        expected = dict(reference.decode(data, raw=True))[b":path"]
        frame = HeadersFrame(stream_id, data=data, flags={"END_HEADERS", "END_STREAM"})
        events = server.receive(raw(frame))
        assert isinstance(events[0], RequestReceived)
        assert events[0].head.path.encode() == expected
        stream_id += 2
    assert expected == b"/b"  # the old bytes name another entry now


@pytest.mark.parametrize("route", ["trailers", "reset-stream"])
def test_a_block_the_cache_holds_is_read_again_after_any_block_changed_the_table(
    route: str,
) -> None:
    """Issue 30, hole 4: trailers, and HEADERS on a stream the server reset, change the HPACK
    table too. Stream 5's block indexes ``x-user: bob``; stream 7's repeated block, cached
    when it meant ``x-user: alice``, must be read as the table says now (a front end that
    multiplexes users on one connection would otherwise pass one user's fields as another's)."""
    server, _ = connected()
    encoder, reference = Encoder(), Decoder()
    fields: list[HeaderTuple | tuple[str, str]] = [
        (":method", "GET"),
        (":path", "/"),
        (":scheme", "https"),
        NeverIndexedHeaderTuple(":authority", "example.com"),
        ("x-user", "alice"),
    ]
    first = bytes(encoder.encode(fields))  # indexes x-user: alice
    repeated = bytes(encoder.encode(fields))  # an index into the table: cached
    bob = bytes(encoder.encode([("x-user", "bob")]))  # indexed where alice was

    def user(stream_id: int, data: bytes, *, end: bool = True) -> str | None:
        expected = dict(reference.decode(data, raw=True)).get(b"x-user")
        flags = {"END_HEADERS", "END_STREAM"} if end else {"END_HEADERS"}
        events = server.receive(raw(HeadersFrame(stream_id, data=data, flags=flags)))
        heads = [e.head for e in events if isinstance(e, RequestReceived)]
        got = heads[0].headers.get("x-user") if heads else None
        assert got == (expected.decode() if expected is not None else None)
        return got

    assert user(1, first) == "alice"
    assert user(3, repeated) == "alice"
    assert user(5, repeated, end=False) == "alice"  # stream 5 stays open
    if route == "reset-stream":
        assert server.reset_stream(5, ErrorCodes.CANCEL)
    reference.decode(bob, raw=True)
    server.receive(raw(HeadersFrame(5, data=bob, flags={"END_HEADERS", "END_STREAM"})))
    assert user(7, repeated) == "bob"


# -- errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "reset"),
    [
        (raw(PriorityFrame(5, depends_on=5)), ErrorCodes.PROTOCOL_ERROR),  # h2spec 5.3.1/2
        (b"\x00\x00\x04\x02\x00\x00\x00\x00\x05" + bytes(4), ErrorCodes.FRAME_SIZE_ERROR),
        (b"\x00\x00\x06\x02\x00\x00\x00\x00\x01" + bytes(6), ErrorCodes.FRAME_SIZE_ERROR),
    ],
    ids=["self-dependent-idle", "short", "long"],
)
def test_a_priority_frame_that_breaks_a_rule_is_a_stream_error(
    data: bytes, reset: ErrorCodes
) -> None:
    """Issue 30, hole 8: RFC 9113 §5.3.1 (a stream cannot depend on itself, idle or not) and
    §6.3 (a PRIORITY not of 5 octets): stream errors, the connection lives on."""
    server, _ = connected()
    stream_id = int.from_bytes(data[5:9], "big")
    assert server.receive(data) == [ServerReset(stream_id, reset)]
    assert raw(RstStreamFrame(stream_id, error_code=reset)) in server.data_to_send()
    after = server.receive(raw(HeadersFrame(7, data=block(GET), flags={"END_HEADERS"})))
    assert [type(e) for e in after] == [RequestReceived]


@pytest.mark.parametrize(
    "first",
    [
        raw(PingFrame(0, opaque_data=b"12345678")),
        raw(SettingsFrame(0, flags={"ACK"})),
        raw(HeadersFrame(1, data=block(GET), flags={"END_HEADERS"})),
    ],
    ids=["ping", "settings-ack", "headers"],
)
def test_the_first_frame_after_the_preface_is_settings(first: bytes) -> None:
    """RFC 9113 §3.4: the client's preface is the magic and a SETTINGS frame (h2spec 3.5)."""
    server = ServerMachine(H2Limits())
    server.initiate()
    assert server.receive(PREFACE + first[:4]) == []  # its type, not yet its flags
    with pytest.raises(H2Error) as error:
        server.receive(first[4:])
    assert error.value.code == ErrorCodes.PROTOCOL_ERROR


@pytest.mark.parametrize(
    ("opened", "then", "code"),
    [
        ([5], 3, ErrorCodes.PROTOCOL_ERROR),  # skipped: never opened (§5.1.1)
        ([5], 1, ErrorCodes.PROTOCOL_ERROR),
        ([1, 7], 5, ErrorCodes.PROTOCOL_ERROR),
        ([1, 3], 1, ErrorCodes.STREAM_CLOSED),  # opened, ended: closed (§5.1)
    ],
    ids=["skipped", "skipped-first", "skipped-later", "closed"],
)
def test_headers_on_a_lower_stream_id(opened: list[int], then: int, code: ErrorCodes) -> None:
    server, _ = connected()
    for stream_id in opened:
        server.receive(
            raw(HeadersFrame(stream_id, data=block(GET), flags={"END_HEADERS", "END_STREAM"}))
        )
        server.send_headers(stream_id, encode_block([(b":status", b"204")]), end=True)
    with pytest.raises(H2Error) as error:
        server.receive(
            raw(HeadersFrame(then, data=block(GET), flags={"END_HEADERS", "END_STREAM"}))
        )
    assert error.value.code == code


OPEN = HeadersFrame(1, data=block(GET), flags={"END_HEADERS"})
PRIORITY_SELF = HeadersFrame(
    3, data=block(GET), flags={"END_HEADERS", "PRIORITY"}, depends_on=3, stream_weight=16
)
BIG = SettingsFrame(0, settings={SettingCodes.MAX_FRAME_SIZE: 100})


@pytest.mark.parametrize(
    ("frames", "code"),
    [
        ([OPEN, WindowUpdateFrame(1, window_increment=0)], ErrorCodes.PROTOCOL_ERROR),
        ([OPEN, WindowUpdateFrame(1, window_increment=2**31 - 1)], ErrorCodes.FLOW_CONTROL_ERROR),
        (
            [OPEN, DataFrame(1, data=b"x" * 16_384)] * 1
            + [DataFrame(1, data=b"x" * 16_384)] * 3
            + [DataFrame(1, data=b"x" * 1_000)],
            ErrorCodes.FLOW_CONTROL_ERROR,
        ),
        ([PRIORITY_SELF], ErrorCodes.PROTOCOL_ERROR),
        (
            [OPEN, HeadersFrame(1, data=block([("x-trailer", "1")]), flags={"END_HEADERS"})],
            ErrorCodes.PROTOCOL_ERROR,
        ),  # trailers that do not end the stream
    ],
    ids=["window-update-0", "window-overflow", "past-the-window", "self-dependent", "trailers"],
)
def test_stream_errors_reset_only_the_stream(frames: list[Frame], code: ErrorCodes) -> None:
    server, _ = connected()
    events = server.receive(raw(*frames))
    reset = [e for e in events if isinstance(e, ServerReset)]
    assert len(reset) == 1 and reset[0].code == code
    assert raw(RstStreamFrame(reset[0].stream_id, error_code=code)) in server.data_to_send()


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (raw(WindowUpdateFrame(0, window_increment=0)), ErrorCodes.PROTOCOL_ERROR),
        (
            raw(OPEN, WindowUpdateFrame(0, window_increment=0)),
            ErrorCodes.PROTOCOL_ERROR,
        ),  # the request before it is dropped: never begun, so retryable (receive's docstring)
        (raw(DataFrame(1, data=b"x")), ErrorCodes.PROTOCOL_ERROR),  # an idle stream
        (raw(RstStreamFrame(9, error_code=0)), ErrorCodes.PROTOCOL_ERROR),  # idle
        (raw(OPEN, WindowUpdateFrame(2, window_increment=1)), ErrorCodes.PROTOCOL_ERROR),
        (raw(PushPromiseFrame(1, promised_stream_id=2, data=b"")), ErrorCodes.PROTOCOL_ERROR),
        (b"\x00\x00\x04\x07\x00\x00\x00\x00\x00" + bytes(4), ErrorCodes.PROTOCOL_ERROR),
        (b"\x00\x00\x08\x07\x00\x00\x00\x00\x01" + bytes(8), ErrorCodes.PROTOCOL_ERROR),
        (raw(ContinuationFrame(1, data=b"")), ErrorCodes.PROTOCOL_ERROR),
        (raw(HeadersFrame(2, data=block(GET), flags={"END_HEADERS"})), ErrorCodes.PROTOCOL_ERROR),
        (raw(HeadersFrame(1, data=block(GET)), DataFrame(1, data=b"x")), ErrorCodes.PROTOCOL_ERROR),
        (raw(BIG), ErrorCodes.PROTOCOL_ERROR),
        (b"\x00\x00\x07\x06\x00\x00\x00\x00\x00" + b"x" * 7, ErrorCodes.FRAME_SIZE_ERROR),  # PING
        (b"\x00\x40\x01\x00\x00\x00\x00\x00\x01" + b"x" * 16_385, ErrorCodes.FRAME_SIZE_ERROR),
        (b"\x00\x00\x02\x00\x08\x00\x00\x00\x01\x05x", ErrorCodes.PROTOCOL_ERROR),  # padding
        (
            raw(HeadersFrame(1, data=b"\xff\xff\xff\xff", flags={"END_HEADERS"})),
            ErrorCodes.COMPRESSION_ERROR,
        ),
    ],
    ids=[
        "connection-window-update-0",
        "after-a-request",
        "data-idle",
        "rst-idle",
        "window-update-even",
        "push-promise",
        "goaway-short",
        "goaway-on-a-stream",
        "lone-continuation",
        "even-stream",
        "frame-inside-a-head",
        "max-frame-size",
        "ping-length",
        "frame-too-large",
        "padding",
        "hpack",
    ],
)
def test_connection_errors(data: bytes, code: ErrorCodes) -> None:
    server, _ = connected()
    with pytest.raises(H2Error) as error:
        server.receive(data)
    assert error.value.code == code


@pytest.mark.parametrize(
    "fields",
    [
        [*GET, ("X-Upper", "1")],
        [*GET, ("connection", "close")],
        [*GET, ("te", "gzip")],
        [*GET, ("x-a", " leading")],
        [*GET, ("x-a", "a\x00b")],
        [*GET, ("host", "other.test")],
        [("accept", "*/*"), *GET],  # a pseudo-field after a field
        [*GET, (":status", "200")],
        [*GET, (":method", "POST")],
        GET[1:],
        [GET[0], *GET[2:]],
        [(":method", "CONNECT"), (":path", "/"), (":authority", "example.com")],
        [*GET, ("content-length", "x1")],
    ],
    ids=[
        "upper-case",
        "connection",
        "te",
        "white-space",
        "nul",
        "host",
        "order",
        "status",
        "twice",
        "no-method",
        "no-path",
        "connect-path",
        "content-length",
    ],
)
def test_malformed_heads_are_stream_errors(fields: list[tuple[str, str]]) -> None:
    server, _ = connected()
    events = server.receive(raw(HeadersFrame(1, data=block(fields), flags={"END_HEADERS"})))
    assert events == [ServerReset(1, ErrorCodes.PROTOCOL_ERROR)]


def test_te_trailers_and_a_connect_are_heads() -> None:
    server, _ = connected()
    connect = [(":method", "CONNECT"), (":authority", "example.com:443")]
    frames = raw(
        HeadersFrame(1, data=block([*GET, ("te", "trailers")]), flags={"END_HEADERS"}),
        HeadersFrame(3, data=block(connect), flags={"END_HEADERS"}),
    )
    assert [type(e) for e in server.receive(frames)] == [RequestReceived, RequestReceived]


def test_a_ping_is_answered_and_frames_on_a_reset_stream_are_ignored() -> None:
    server, _ = connected()
    assert server.receive(raw(PingFrame(0, opaque_data=b"12345678"))) == []
    assert server.data_to_send() == raw(PingFrame(0, flags={"ACK"}, opaque_data=b"12345678"))
    server.receive(raw(OPEN))
    assert server.reset_stream(1, ErrorCodes.CANCEL)
    server.data_to_send()
    assert server.receive(raw(DataFrame(1, data=b"late"), OPEN)) == []  # in flight: ignored
    assert server.data_to_send() == b""  # its 4 bytes given back with the next half window
    assert server.control == 1  # the PING


def test_a_goaway_is_reported_and_an_unknown_frame_ignored() -> None:
    """RFC 9113 §6.8: a client's GOAWAY says the last stream it will act on, and its code;
    §5.5: a frame of an unknown type is ignored (but counted as work that asked nothing)."""
    server, client = connected()
    assert server.receive(b"\x00\x00\x03\xfa\x00\x00\x00\x00\x00abc") == []
    assert server.control == 1
    client.close_connection(error_code=ErrorCodes.ENHANCE_YOUR_CALM, last_stream_id=5)
    assert server.receive(client.data_to_send()) == [GoneAway(5, ErrorCodes.ENHANCE_YOUR_CALM)]
    assert server.data_to_send() == b""


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 12), st.integers(0, 255), st.integers(0, 9), st.binary(max_size=40)
        ),
        max_size=12,
    )
)
def test_any_frames_give_events_or_a_connection_error(
    frames: list[tuple[int, int, int, bytes]],
) -> None:
    """Whatever frames a client sends, the machine answers with events and frames, or a
    connection error: never another exception."""
    server = ServerMachine(H2Limits())
    server.initiate()
    data = PREFACE + b"".join(
        len(payload).to_bytes(3, "big") + bytes((kind, flags)) + stream.to_bytes(4, "big") + payload
        for kind, flags, stream, payload in frames
    )
    with contextlib.suppress(H2Error):
        server.receive(data)
    assert server.open_streams <= H2Limits().max_concurrent_streams


def test_a_small_answer_goes_in_one_go_when_the_windows_take_it() -> None:
    server, client = connected()
    client.send_headers(1, GET, end_stream=True)
    server.receive(client.data_to_send())
    head = encode_block([(b":status", b"200")])
    assert server.send_answer(1, head, b"x" * 100)
    out = server.data_to_send()
    assert out == raw(
        # The client's SETTINGS named its table's size: the first block updates it to 0.
        HeadersFrame(1, data=b"\x20" + head, flags={"END_HEADERS"}),
        DataFrame(1, data=b"x" * 100, flags={"END_STREAM"}),
    )
    assert server.open_streams == 0
    client.update_settings({SettingCodes.INITIAL_WINDOW_SIZE: 10})
    client.send_headers(3, GET, end_stream=True)
    server.receive(client.data_to_send())
    server.data_to_send()
    assert not server.send_answer(3, head, b"x" * 100)
    assert server.data_to_send() == b""


def test_windows_are_given_back_by_halves() -> None:
    """What was read is given back once half a window has been (as h2 did): a stream's at
    32 KiB, the connection's at 512 KiB, never a WINDOW_UPDATE per DATA frame."""
    server, _ = connected()
    server.receive(raw(HeadersFrame(1, data=block([*GET[:3], GET[3]]), flags={"END_HEADERS"})))
    for size in (16_384, 16_382):
        server.receive(raw(DataFrame(1, data=b"x" * size)))
        server.acknowledge(size, 1)
        assert server.data_to_send() == b""
    server.receive(raw(DataFrame(1, data=b"x")))
    server.acknowledge(1, 1)
    assert server.data_to_send() == raw(WindowUpdateFrame(1, window_increment=32_767))
    assert server.reset_stream(1, ErrorCodes.CANCEL)
    server.data_to_send()
    late = raw(DataFrame(1, data=b"x" * 16_384))  # on a stream reset: read by no one
    for _ in range(30):
        assert server.receive(late) == []
    assert server.data_to_send() == b""  # 32,767 + 491,520 bytes: not yet half of 1 MiB
    server.receive(late)
    assert server.data_to_send() == raw(WindowUpdateFrame(0, window_increment=540_671))


@pytest.mark.slow
def test_only_small_heads_are_kept() -> None:
    """A block that leaves the HPACK table alone (literals without indexing, as frames.py
    encodes) is read once and its head reused; one past 512 bytes is read each time, so a
    client cannot make the cache hold large heads."""
    server, _ = connected()
    fields = [(b":method", b"GET"), (b":path", b"/a"), (b":scheme", b"https")]
    fields.append((b":authority", b"example.com"))
    heads = {}
    for name, extra in (("small", b"s" * 10), ("large", b"b" * 5000)):
        data = encode_block([*fields, (b"x-pad", extra)])
        seen = []
        for stream_id in (1, 3) if name == "small" else (5, 7):
            frame = HeadersFrame(stream_id, data=data, flags={"END_HEADERS", "END_STREAM"})
            event = server.receive(raw(frame))[0]
            assert isinstance(event, RequestReceived)
            seen.append(event.head)
        assert seen[0] == seen[1]
        heads[name] = seen[0] is seen[1]
    assert heads == {"small": True, "large": False}


def test_a_header_block_past_its_cap_is_refused_before_it_is_decoded() -> None:
    """Issue 32, hole 4: the encoded block (HEADERS and CONTINUATION payloads) is held to
    twice SETTINGS_MAX_HEADER_LIST_SIZE (here 8 KiB: 16 KiB). Past it, ENHANCE_YOUR_CALM at
    once, before END_HEADERS, so nothing is decoded; before, 64 frames of 16 KiB (1 MiB)
    were held, then decoded on the event loop."""
    server, _ = connected(max_header_list_bytes=8192)
    head = HeadersFrame(1, data=block(GET), flags={"END_STREAM"})
    server.receive(raw(head, ContinuationFrame(1, data=b"\x00" * 8192)))  # 8 KiB and a bit
    with pytest.raises(H2Error) as error:
        server.receive(raw(ContinuationFrame(1, data=b"\x00" * 8192)))
    assert error.value.code == ErrorCodes.ENHANCE_YOUR_CALM


def test_a_head_near_the_list_limit_in_several_frames_is_read() -> None:
    """A head just within SETTINGS_MAX_HEADER_LIST_SIZE, sent in pieces of 1 KiB, is a
    request: the cap leaves every head the list limit allows its room."""
    server, _ = connected(max_header_list_bytes=8192)
    data = block([*GET, ("x-pad", "a" * 7900)])
    pieces = [data[at : at + 1024] for at in range(0, len(data), 1024)]
    frames: list[Frame] = [HeadersFrame(1, data=pieces[0], flags={"END_STREAM"})]
    frames += [ContinuationFrame(1, data=piece) for piece in pieces[1:-1]]
    frames.append(ContinuationFrame(1, data=pieces[-1], flags={"END_HEADERS"}))
    events = server.receive(raw(*frames))
    assert len(events) == 1 and isinstance(events[0], RequestReceived)
    assert len(events[0].head.headers["x-pad"]) == 7900
