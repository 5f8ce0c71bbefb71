"""HTTP/2's limits (decision 0036), each attacked with the h2 library (and raw frames where
h2 would refuse to break a rule) against the real service: the attacker's connection gets
a GOAWAY (or its stream a RST_STREAM) and is closed; another connection is served all the
while, and once the attacker is gone the edge holds no connection for it.

The attacks, and what they were in the wild: Rapid Reset (CVE-2023-44487), the CONTINUATION
flood (2024), HPACK bombs, floods of SETTINGS, PING, PRIORITY and WINDOW_UPDATE frames
(CVE-2019-9512, -9515, -9513, -9517), a client that stops reading (zero window, -9511),
too many concurrent streams, idle connections, and connections that never end."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from h2.errors import ErrorCodes
from h2.settings import SettingCodes
from hpack import Encoder
from hpack.hpack import encode_integer
from hyperframe.frame import (
    ContinuationFrame,
    PingFrame,
    PriorityFrame,
    RstStreamFrame,
    SettingsFrame,
    WindowUpdateFrame,
)

from proxy.process.service import Service, running
from tests.conftest import Origin
from tests.edge.h2_support import Answer, FrameReader, RawH2, headers_block, headers_frame
from tests.edge.tls_support import Certificates, pair_keys, tls_config
from tests.polling import until

CACHEABLE = {"Cache-Control": "max-age=60"}


@pytest.fixture
def certs(tmp_path: Path) -> Certificates:
    return Certificates(tmp_path)


@asynccontextmanager
async def edge(
    tmp_path: Path, origin: Origin, certs: Certificates, **limits: Any
) -> AsyncIterator[Service]:
    origin.reply("/ok", b"still served", headers=CACHEABLE)
    edge_keys = {**pair_keys(certs.issue("example.com")), **limits}
    async with running(tls_config(tmp_path, origin.url, edge=edge_keys)) as service:
        yield service


async def connect(service: Service, certs: Certificates) -> RawH2:
    assert service.tls_url is not None
    return await RawH2.open(service.tls_url, certs.client())


def edge_connections(service: Service) -> int:
    return next(g for g in service.telemetry.connections if g.listener == "edge").figures()[0]


async def others_still_served(service: Service, certs: Certificates) -> None:
    client = await connect(service, certs)
    answer = await client.answer(client.request("/ok"))
    assert (answer.status, answer.body) == (200, b"still served")
    await client.close()
    await until(lambda: edge_connections(service) == 0)


async def goaway_and_close(client: RawH2, code: ErrorCodes) -> None:
    await client.until_closed()
    assert client.goaway is not None
    assert client.goaway.error_code == code


def raw(client: RawH2, *frames: bytes) -> None:
    client.flush()
    client.send_raw(b"".join(frames))


# -- streams --------------------------------------------------------------------------------


async def test_concurrent_streams_past_the_limit(
    tmp_path: Path, origin: Origin, certs: Certificates
) -> None:
    """SETTINGS_MAX_CONCURRENT_STREAMS is 128 by default (nginx's); here 4. The fifth open
    stream is refused (RST_STREAM REFUSED_STREAM, RFC 9113 §5.1.2: the client may retry it),
    as nginx does; the four others are answered and the connection goes on serving."""
    release = asyncio.Event()

    async def slow(request: web.Request) -> web.StreamResponse:
        await release.wait()
        return web.Response(body=b"slow")

    origin.route("/slow", slow)
    async with edge(tmp_path, origin, certs, http2_max_concurrent_streams=4) as service:
        client = await connect(service, certs)
        # Sent before the client has read the server's SETTINGS (h2 would hold back the
        # fifth once it has): the edge counts streams from the first one.
        ids = [client.request("/slow") for _ in range(5)]
        refused = await client.answer(ids[4])
        assert refused.reset == ErrorCodes.REFUSED_STREAM
        assert client.h2.remote_settings[SettingCodes.MAX_CONCURRENT_STREAMS] == 4
        release.set()
        answers = [await client.answer(stream_id) for stream_id in ids[:4]]
        assert [(a.status, a.body) for a in answers] == [(200, b"slow")] * 4
        again = await client.answer(client.request("/ok"))
        assert (again.status, again.body, client.goaway) == (200, b"still served", None)
        await client.close()
        await others_still_served(service, certs)


async def test_streams_refused_again_and_again_spend_the_reset_budget(
    tmp_path: Path, origin: Origin, certs: Certificates
) -> None:
    """A client that keeps opening streams past the limit, one at a time (so no read holds
    more new streams than nginx's per-read bound): each refusal spends the reset budget
    (http2_reset_budget, here 10) as a cancelled stream does; spent, GOAWAY
    ENHANCE_YOUR_CALM and close."""
    release = asyncio.Event()

    async def slow(request: web.Request) -> web.StreamResponse:
        await release.wait()
        return web.Response(body=b"slow")

    origin.route("/slow", slow)
    async with edge(
        tmp_path, origin, certs, http2_max_concurrent_streams=2, http2_reset_budget=10
    ) as service:
        client = await connect(service, certs)
        encoder = Encoder()
        raw(client, *(headers_frame(1 + 2 * i, headers_block(encoder, "/slow")) for i in range(2)))
        frames = FrameReader(client)
        for i in range(2, 12):
            raw(client, headers_frame(1 + 2 * i, headers_block(encoder, "/slow")))
            kind, stream_id, payload = await frames.next(not_of=(0x4, 0x6, 0x8))
            assert (kind, stream_id, payload) == (0x3, 1 + 2 * i, b"\x00\x00\x00\x07")
        raw(client, headers_frame(25, headers_block(encoder, "/slow")))
        kind, _, payload = await frames.next(not_of=(0x3, 0x4, 0x6, 0x8))
        assert (kind, payload[4:8]) == (0x7, b"\x00\x00\x00\x0b")  # ENHANCE_YOUR_CALM
        release.set()
        await others_still_served(service, certs)


async def test_many_new_streams_in_one_read(
    tmp_path: Path, origin: Origin, certs: Certificates
) -> None:
    """nginx 1.25.3's bound: more new streams in one read than twice the concurrent limit
    (refused ones included) is GOAWAY ENHANCE_YOUR_CALM, whatever the reset budget."""
    async with edge(
        tmp_path, origin, certs, http2_max_concurrent_streams=2, http2_reset_budget=1000
    ) as service:
        client = await connect(service, certs)
        encoder = Encoder()
        raw(client, *(headers_frame(1 + 2 * i, headers_block(encoder, "/ok")) for i in range(5)))
        await goaway_and_close(client, ErrorCodes.ENHANCE_YOUR_CALM)
        await others_still_served(service, certs)


async def test_default_limit_is_128_streams(
    tmp_path: Path, origin: Origin, certs: Certificates
) -> None:
    async with edge(tmp_path, origin, certs) as service:
        client = await connect(service, certs)
        await client.read_events()
        settings = client.h2.remote_settings
        assert settings[SettingCodes.MAX_CONCURRENT_STREAMS] == 128
        assert settings[SettingCodes.MAX_HEADER_LIST_SIZE] == 64 * 1024
        assert settings[SettingCodes.INITIAL_WINDOW_SIZE] == 65_535
        assert settings.enable_connect_protocol == 0  # no WebSocket over h2 (RFC 8441)
        await client.close()


async def test_rapid_reset(tmp_path: Path, origin: Origin, certs: Certificates) -> None:
    """Streams opened and cancelled at once (CVE-2023-44487): past the reset budget,
    GOAWAY ENHANCE_YOUR_CALM. The cancelled streams cost the origin nothing."""
    async with edge(tmp_path, origin, certs, http2_reset_budget=20) as service:
        client = await connect(service, certs)
        encoder = Encoder()
        frames = []
        for i in range(40):
            stream_id = 1 + 2 * i
            frames.append(headers_frame(stream_id, headers_block(encoder, f"/r{i}")))
            frames.append(RstStreamFrame(stream_id, error_code=ErrorCodes.CANCEL).serialize())
        raw(client, *frames)
        await goaway_and_close(client, ErrorCodes.ENHANCE_YOUR_CALM)
        await others_still_served(service, certs)
        assert not [seen for seen in origin.seen if seen.target.startswith("/r")]
        guard = next(g for g in service.telemetry.connections if g.listener == "edge")
        # open, connections, streams (the 21st reset spent the budget of 20; then the other
        # client's one), GOAWAYs with an error
        assert guard.figures()[13:17] == [0, 2, 22, 1]


async def test_resets_between_finished_answers_are_no_attack(
    tmp_path: Path, origin: Origin, certs: Certificates
) -> None:
    """A browser cancels some streams and lets others finish: each finished answer earns
    back one reset, so the budget is never spent."""
    async with edge(tmp_path, origin, certs, http2_reset_budget=3) as service:
        client = await connect(service, certs)
        for _ in range(10):
            cancelled = client.request("/ok")
            client.h2.reset_stream(cancelled, ErrorCodes.CANCEL)
            answer = await client.answer(client.request("/ok"))
            assert answer.status == 200
        assert client.goaway is None
        await client.close()


async def test_max_requests_per_connection(
    tmp_path: Path, origin: Origin, certs: Certificates
) -> None:
    """After http2_max_requests requests (nginx's keepalive_requests, 1000), GOAWAY NO_ERROR
    naming the last one: it is answered, a later stream is refused, and the connection
    closes."""
    async with edge(tmp_path, origin, certs, http2_max_requests=3) as service:
        client = await connect(service, certs)
        streams = [client.request("/ok") for _ in range(4)]
        answers = [await client.answer(stream) for stream in streams[:3]]
        assert [a.status for a in answers] == [200, 200, 200]
        refused = await client.answer(streams[3])
        assert refused.reset == ErrorCodes.REFUSED_STREAM
        await client.until_closed()
        assert client.goaway is not None
        assert client.goaway.error_code == ErrorCodes.NO_ERROR
        assert client.goaway.last_stream_id == streams[2]
        await others_still_served(service, certs)


async def test_an_http2_connection_counts_against_max_connections(
    tmp_path: Path, origin: Origin, certs: Certificates
) -> None:
    async with edge(tmp_path, origin, certs, max_connections=1) as service:
        client = await connect(service, certs)
        assert (await client.answer(client.request("/ok"))).status == 200
        assert edge_connections(service) == 1
        with pytest.raises((ssl.SSLError, ConnectionError)):
            await connect(service, certs)  # closed at the limit, before TLS
        await client.close()
        await others_still_served(service, certs)


# -- heads ----------------------------------------------------------------------------------


async def test_hpack_bomb(tmp_path: Path, origin: Origin, certs: Certificates) -> None:
    """One field of 3 KB indexed once, then referred to by one byte 30 times: 90 KB decoded
    from a few KB, past the 64 KiB header list limit."""
    async with edge(tmp_path, origin, certs) as service:
        client = await connect(service, certs)
        encoder = Encoder()
        big = ("x-bomb", "b" * 3000)
        first = encoder.encode([(":method", "GET"), (":path", "/"), (":scheme", "https")])
        block = bytes(first) + bytes(encoder.encode([(":authority", "example.com"), big]))
        block += bytes(encoder.encode([big] * 30))  # each an index into the table
        assert len(block) < 5000
        raw(client, headers_frame(1, block))
        await goaway_and_close(client, ErrorCodes.ENHANCE_YOUR_CALM)
        await others_still_served(service, certs)


async def test_continuation_flood(tmp_path: Path, origin: Origin, certs: Certificates) -> None:
    """A head that never ends: CONTINUATION frames without END_HEADERS (2024). The edge
    keeps at most 64 of them, then GOAWAY."""
    async with edge(tmp_path, origin, certs) as service:
        client = await connect(service, certs)
        block = headers_block(Encoder(), "/")
        frames = [headers_frame(1, block, whole=False)]
        frames += [ContinuationFrame(1, data=b"").serialize() for _ in range(200)]
        raw(client, *frames)
        await client.until_closed()
        assert client.goaway is not None
        assert client.goaway.error_code in (ErrorCodes.PROTOCOL_ERROR, ErrorCodes.ENHANCE_YOUR_CALM)
        await others_still_served(service, certs)


def huffman_block(size: int) -> bytes:
    """A GET's head whose last field is one Huffman-coded literal of ``size`` bytes (8
    "a"s in each 5): the costliest block to decode for its size."""
    value = bytes.fromhex("18c6318c63") * (size // 5)
    length = encode_integer(len(value), 7)
    length[0] |= 0x80  # Huffman-coded
    return headers_block(Encoder(), "/") + b"\x00\x05x-big" + bytes(length) + value


def block_frames(block: bytes, *, whole: bool = True) -> list[bytes]:
    """HEADERS and CONTINUATION frames of 16 KiB carrying ``block``; END_HEADERS on the
    last if ``whole``."""
    pieces = [block[at : at + 16_384] for at in range(0, len(block), 16_384)]
    frames = [headers_frame(1, pieces[0], whole=False)]
    frames += [ContinuationFrame(1, data=piece).serialize() for piece in pieces[1:-1]]
    last = {"END_HEADERS"} if whole else set()
    frames.append(ContinuationFrame(1, data=pieces[-1], flags=last).serialize())
    return frames


async def test_a_large_header_block_is_refused_before_it_is_decoded(
    tmp_path: Path, origin: Origin, certs: Certificates
) -> None:
    """Issue 32, hole 4: the encoded block is capped at twice the header list limit (64
    KiB: 128 KiB) and refused, GOAWAY ENHANCE_YOUR_CALM, as soon as it passes it, before
    its end and before anything is decoded. Before, 64 frames (1 MiB) were held and a
    Huffman literal of 1 MiB decoded on the event loop (0.4 s or more), every other client
    of the process waiting: here hits on another connection, asked while three such blocks
    arrive, stay fast."""
    async with edge(tmp_path, origin, certs) as service:
        other = await connect(service, certs)
        assert (await other.answer(other.request("/ok"))).status == 200  # a hit from now on
        frames = block_frames(huffman_block(1024 * 1024 - 1024))
        assert len(frames) == 64
        unended = await connect(service, certs)
        await unended.read_events()  # the server's SETTINGS, acknowledged before the block
        raw(unended, *block_frames(huffman_block(256 * 1024), whole=False))
        await goaway_and_close(unended, ErrorCodes.ENHANCE_YOUR_CALM)
        attackers = [await connect(service, certs) for _ in range(3)]
        for attacker in attackers:
            await attacker.read_events()
            raw(attacker, *frames)
        refused = asyncio.gather(
            *(goaway_and_close(a, ErrorCodes.ENHANCE_YOUR_CALM) for a in attackers)
        )
        loop = asyncio.get_running_loop()
        slowest = 0.0
        while not refused.done():
            began = loop.time()
            answer = await other.answer(other.request("/ok"))
            slowest = max(slowest, loop.time() - began)
            assert (answer.status, answer.body) == (200, b"still served")
        await refused
        assert slowest < 0.3, f"a hit took {slowest:.3f} s"
        await other.close()
        await others_still_served(service, certs)


# -- control-frame floods -------------------------------------------------------------------


def _settings(_: int) -> bytes:
    return SettingsFrame(0, settings={SettingCodes.MAX_FRAME_SIZE: 16384}).serialize()


def _ping(i: int) -> bytes:
    return PingFrame(0, opaque_data=i.to_bytes(8, "big")).serialize()


def _priority(i: int) -> bytes:
    return PriorityFrame(1 + 2 * (i % 1000), depends_on=0, stream_weight=16).serialize()


def _window_update(_: int) -> bytes:
    return WindowUpdateFrame(0, window_increment=1).serialize()


@pytest.mark.parametrize(
    "frame", [_settings, _ping, _priority, _window_update], ids=lambda f: f.__name__.strip("_")
)
async def test_control_frame_floods(
    tmp_path: Path, origin: Origin, certs: Certificates, frame: Callable[[int], bytes]
) -> None:
    """Each frame asks the server for work (an acknowledgement, a tree update, a window
    change) but no request: past the burst (1000) at more than 100 a second, GOAWAY."""
    async with edge(tmp_path, origin, certs, http2_control_frame_burst=200) as service:
        client = await connect(service, certs)
        raw(client, *(frame(i) for i in range(2000)))
        await goaway_and_close(client, ErrorCodes.ENHANCE_YOUR_CALM)
        await others_still_served(service, certs)


# -- time -----------------------------------------------------------------------------------


async def test_zero_window_stall_is_bounded_by_send_timeout(
    tmp_path: Path, origin: Origin, certs: Certificates
) -> None:
    """A client that grants no window (and so reads nothing of the body): the answer waits
    send_timeout (nginx's, 60 s; here 0.3), then its stream is reset (CANCEL)."""
    origin.reply("/big", b"z" * 100_000, headers=CACHEABLE)
    async with edge(tmp_path, origin, certs, send_timeout=0.3) as service:
        client = await connect(service, certs)
        client.h2.update_settings({SettingCodes.INITIAL_WINDOW_SIZE: 0})
        await client.read_events()
        answer = await client.answer(client.request("/big"))
        assert answer.status == 200 and answer.body == b""
        assert answer.reset == ErrorCodes.CANCEL
        await client.close()
        await others_still_served(service, certs)


async def test_idle_connection_timeout(tmp_path: Path, origin: Origin, certs: Certificates) -> None:
    """No stream open for keepalive_timeout: GOAWAY NO_ERROR, and the connection closes,
    whatever PINGs it sends meanwhile."""
    async with edge(tmp_path, origin, certs, keepalive_timeout=0.3) as service:
        client = await connect(service, certs)
        assert (await client.answer(client.request("/ok"))).status == 200
        client.h2.ping(b"12345678")
        client.flush()
        await client.until_closed()
        assert client.goaway is not None and client.goaway.error_code == ErrorCodes.NO_ERROR
        await until(lambda: edge_connections(service) == 0)


async def test_idle_stream_body_timeout(
    tmp_path: Path, origin: Origin, certs: Certificates
) -> None:
    """A request body that stops arriving: the edge's body_timeout (decision 0015) answers
    it 408, and the stream is reset (NO_ERROR: RFC 9113 §8.1); the connection lives on."""
    origin.reply("/post", b"ok")
    async with edge(tmp_path, origin, certs, body_timeout=0.3) as service:
        client = await connect(service, certs)
        stream = client.request("/post", method="POST", body=b"part", end=False)
        answer = await client.answer(stream)
        assert (answer.status, answer.ended) == (408, True)
        assert answer.body == b"408 Request Timeout: the request body stopped arriving\n"
        assert answer.reset == ErrorCodes.NO_ERROR  # the rest of the body: not wanted
        again = await client.answer(client.request("/ok"))
        assert again.status == 200
        await client.close()


# -- shutdown -------------------------------------------------------------------------------


async def test_graceful_shutdown_finishes_streams_in_flight(
    tmp_path: Path, origin: Origin, certs: Certificates
) -> None:
    """At shutdown: GOAWAY NO_ERROR naming the last stream taken; that stream's answer
    still comes whole, then the connection closes."""
    release = asyncio.Event()

    async def slow(request: web.Request) -> web.StreamResponse:
        await release.wait()
        return web.Response(body=b"finished")

    origin.route("/slow", slow)
    async with edge(tmp_path, origin, certs) as service:
        client = await connect(service, certs)
        stream = client.request("/slow")
        await until(lambda: origin.seen)
        drain = asyncio.ensure_future(service.draining.drain())
        while client.goaway is None:
            await client.read_events()
        assert client.goaway.error_code == ErrorCodes.NO_ERROR
        assert client.goaway.last_stream_id == stream
        release.set()
        answer = await client.answer(stream)
        assert (answer.status, answer.body) == (200, b"finished")
        await client.until_closed()
        await drain


@pytest.mark.slow
async def test_extended_connect_is_refused(
    tmp_path: Path, origin: Origin, certs: Certificates
) -> None:
    """WebSocket over HTTP/2 (RFC 8441) is not served: SETTINGS_ENABLE_CONNECT_PROTOCOL is
    never sent, and a CONNECT stream gets a 501; the connection goes on."""
    async with edge(tmp_path, origin, certs) as service:
        client = await connect(service, certs)
        stream = client.h2.get_next_available_stream_id()
        client.h2.send_headers(
            stream, [(":method", "CONNECT"), (":authority", "example.com:443")], end_stream=True
        )
        client.answers[stream] = Answer()
        client.flush()
        answer = await client.answer(stream)
        assert answer.status == 501
        assert (await client.answer(client.request("/ok"))).status == 200
        await client.close()
        await others_still_served(service, certs)
