"""HTTP/2 streams open at once per client address, over its connections (issue 32, decision
0060), against a real ``cdn-proxy serve`` (a child process, h2c).

Before: one address could open 1,024 connections of 128 streams each, every stream holding
its state, its request and a handler task (0.9 MiB for 128 zero-window streams). Now:

- past ``edge.http2_streams_per_client`` a new stream is refused (RST_STREAM
  REFUSED_STREAM, RFC 9113 §8.7) before it becomes a request, whichever of the address's
  connections it comes on; another address is not held back, and a stream that ends lets a
  new one in; /metrics shows the streams open, the cap and the refusals;
- a stream leaves the count however it ends: answered, reset by the client before or after
  its handler started, reset by the edge (send_timeout), its connection closed with
  streams still waiting for their turn, or after the client's GOAWAY;
- what one address's zero-window streams make the edge hold is the cap's worth, not its
  connections' worth.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from h2.errors import ErrorCodes
from h2.settings import SettingCodes
from hpack import Encoder

from benchmarks.large_objects import memory
from proxy.edge.h2.client_streams import ClientStreams
from tests.conftest import Origin
from tests.edge.h2_support import Answer, RawH2, headers_block, headers_frame
from tests.edge.test_answer_budget import samples, zero_window
from tests.edge.test_answers_held import KIB, MIB
from tests.nodes import Node, write_config
from tests.polling import until

ONLY_IF_CACHED = [("cache-control", "only-if-cached")]  # a miss: the edge's own 504
REFUSED = int(ErrorCodes.REFUSED_STREAM)


async def settled(client: RawH2, streams: list[int], within: float = 10.0) -> list[int | str]:
    """Each stream's answer status, or "refused" for a stream reset REFUSED_STREAM, once
    every one has either."""
    async with asyncio.timeout(within):
        while any(
            not client.answers[s].status and client.answers[s].reset is None for s in streams
        ):
            await client.read_events(within)
    return [
        "refused" if client.answers[s].reset == REFUSED else client.answers[s].status
        for s in streams
    ]


async def test_the_count_admits_within_the_cap_and_forgets_an_address_at_zero() -> None:
    streams = ClientStreams(per_client=2)
    assert streams.admit("10.0.0.1") and streams.admit("10.0.0.1")
    assert not streams.admit("10.0.0.1")  # past the cap: refused, counted
    assert streams.admit("10.0.0.2") and streams.admit(None)  # None: no per-client count
    assert streams.figures() == [4, 2, 1]
    streams.release("10.0.0.1")
    assert streams.admit("10.0.0.1")  # one ended: one more
    for client in ("10.0.0.1", "10.0.0.1", "10.0.0.2", None):
        streams.release(client)
    assert streams.figures() == [0, 2, 1] and not streams._by_client
    unlimited = ClientStreams(per_client=0)
    assert all(unlimited.admit("10.0.0.1") for _ in range(10_000))
    streams.close()
    unlimited.close()


async def open_streams(node: Node) -> float:
    return (await samples(node.api))["cdn_proxy_http2_streams_open"]


async def test_streams_past_an_addresss_cap_are_refused_and_others_go_on(
    tmp_path: Path, origin: Origin, nodes: list[Node]
) -> None:
    edge = "h2c = true\nhttp2_streams_per_client = 6\n"
    node = await Node.start(write_config(tmp_path, origin.url, edge=edge))
    nodes.append(node)
    first, second = await zero_window(node.edge), await zero_window(node.edge)
    elsewhere = await RawH2.open(node.edge, local_host="127.0.0.2")
    elsewhere.h2.update_settings({SettingCodes.INITIAL_WINDOW_SIZE: 0})
    elsewhere.flush()
    try:
        # Zero-window streams: each 504 waits for window, so each stream stays open.
        held = [first.request(f"/a?n={n}", headers=ONLY_IF_CACHED) for n in range(4)]
        assert await settled(first, held) == [504] * 4
        more = [second.request(f"/b?n={n}", headers=ONLY_IF_CACHED) for n in range(4)]
        assert await settled(second, more) == [504, 504, "refused", "refused"]
        # Another address has streams of its own.
        theirs = [elsewhere.request(f"/c?n={n}", headers=ONLY_IF_CACHED) for n in range(4)]
        assert await settled(elsewhere, theirs) == [504] * 4
        figures = await samples(node.api)
        assert figures["cdn_proxy_http2_streams_open"] == 10
        assert figures["cdn_proxy_http2_streams_client_max"] == 6
        assert figures["cdn_proxy_http2_streams_refused_total"] == 2
        # The refused streams never became requests.
        assert figures["cdn_proxy_http2_streams_total"] == 10
        # A stream that ends lets a new one in, on any of the address's connections.
        first.h2.reset_stream(held[0], ErrorCodes.CANCEL)
        first.flush()
        await until(lambda: _below(node, 10), within=10, every=0.05)
        again = second.request("/b?n=again", headers=ONLY_IF_CACHED)
        assert await settled(second, [again]) == [504]
        assert second.goaway is None and first.goaway is None
    finally:
        for client in (first, second, elsewhere):
            await client.close()
    assert origin.seen == []


async def _below(node: Node, count: int) -> bool:
    return await open_streams(node) < count


async def test_the_count_returns_to_zero_however_streams_end(
    tmp_path: Path, origin: Origin, nodes: list[Node]
) -> None:
    edge = "h2c = true\nhttp2_streams_per_client = 200\nsend_timeout = 0.5\n"
    node = await Node.start(write_config(tmp_path, origin.url, edge=edge))
    nodes.append(node)
    clients: list[RawH2] = []
    try:
        # Answered in full, to a client that reads.
        reader = await RawH2.open(node.edge)
        clients.append(reader)
        done = [reader.request(f"/r?n={n}", headers=ONLY_IF_CACHED) for n in range(20)]
        for stream in done:
            assert (await reader.answer(stream)).status == 504
        # Reset by the client once answered in part (its handler started).
        late = await zero_window(node.edge)
        clients.append(late)
        begun = [late.request(f"/l?n={n}", headers=ONLY_IF_CACHED) for n in range(10)]
        assert await settled(late, begun) == [504] * 10
        for stream in begun:
            late.h2.reset_stream(stream, ErrorCodes.CANCEL)
        late.flush()
        # Reset by the client before their turn came: 40 streams in one write, the last 24
        # reset in it (16 start per read).
        early = await zero_window(node.edge)
        clients.append(early)
        burst = [_queued(early, f"/e?n={n}") for n in range(40)]
        for stream in burst[16:]:
            early.h2.reset_stream(stream, ErrorCodes.CANCEL)
        early.flush()
        # Reset by the edge: zero-window answers past send_timeout (0.5 s).
        stalled = await zero_window(node.edge)
        clients.append(stalled)
        timed = [stalled.request(f"/t?n={n}", headers=ONLY_IF_CACHED) for n in range(10)]
        # The client's GOAWAY: its streams still end (here, by the send timeout).
        leaving = await zero_window(node.edge)
        clients.append(leaving)
        for n in range(5):
            leaving.request(f"/g?n={n}", headers=ONLY_IF_CACHED)
        leaving.h2.close_connection()
        leaving.flush()
        # The connection closed: with streams answered in part, and with streams perhaps
        # still waiting for their turn (128 in one write, then the close).
        closed = await zero_window(node.edge)
        started = [closed.request(f"/c?n={n}", headers=ONLY_IF_CACHED) for n in range(10)]
        assert await settled(closed, started) == [504] * 10
        await closed.close()
        dropped = await zero_window(node.edge)
        for n in range(128):
            _queued(dropped, f"/d?n={n}")
        dropped.flush()
        await dropped.close()
        # Closed by the edge (GOAWAY ENHANCE_YOUR_CALM: more than twice the concurrent
        # streams new in one read), with 112 of its 128 streams waiting for their turn.
        flood = await zero_window(node.edge)
        encoder = Encoder()
        flood.send_raw(
            b"".join(
                headers_frame(2 * n + 1, headers_block(encoder, f"/f?n={n}"))
                for n in range(2 * 128 + 1)
            )
        )
        await flood.until_closed(10)
        await flood.close()
        assert await settled(stalled, timed) == [504] * 10
        await until(lambda: _timed_out(stalled, timed), within=10, every=0.05)
        figures = await samples(node.api)
        assert figures["cdn_proxy_http2_streams_total"] >= 20 + 10 + 16 + 10 + 5 + 10
        await until(lambda: _none_open(node), within=10, every=0.1)
    finally:
        for client in clients:
            await client.close()
    # Only the flood's streams that started asked the origin (the rest never became requests).
    flooded = [seen.target for seen in origin.seen]
    assert all(t.startswith("/f?") for t in flooded) and len(flooded) <= 16, flooded


def _queued(client: RawH2, path: str) -> int:
    """A stream's HEADERS queued in the client, not yet written (``flush`` sends them all in
    one write)."""
    stream_id = client.h2.get_next_available_stream_id()
    fields = [
        (":method", "GET"),
        (":path", path),
        (":scheme", "https"),
        (":authority", "example.com"),
        *ONLY_IF_CACHED,
    ]
    client.h2.send_headers(stream_id, fields, end_stream=True)
    client.answers[stream_id] = Answer()
    return stream_id


async def _timed_out(client: RawH2, streams: list[int]) -> bool:
    if any(client.answers[s].reset is None for s in streams):
        await client.read_events(1)
    return all(client.answers[s].reset is not None for s in streams)


async def _none_open(node: Node) -> bool:
    return await open_streams(node) == 0


@pytest.mark.slow
async def test_one_addresss_zero_window_streams_hold_the_caps_worth(
    tmp_path: Path, origin: Origin, nodes: list[Node]
) -> None:
    """16 zero-window connections of 128 streams from one address against a cap of 128:
    128 streams held, the rest refused. Measured: RSS +15.1 MiB with no cap (0), +1.0 MiB
    with it."""
    cap, connections = 128, 16
    edge = f"h2c = true\nhttp2_streams_per_client = {cap}\n"
    node = await Node.start(write_config(tmp_path, origin.url, edge=edge))
    nodes.append(node)
    pid = node.process.pid
    warm = await zero_window(node.edge)  # the first connection's own costs, before measuring
    assert await settled(warm, [warm.request("/w", headers=ONLY_IF_CACHED)]) == [504]
    await warm.close()
    await until(lambda: _none_open(node), within=10, every=0.1)
    idle = memory(pid)["VmRSS"]
    clients = [await zero_window(node.edge) for _ in range(connections)]
    seen: list[int | str] = []
    try:
        for index, client in enumerate(clients):
            streams = [
                client.request(f"/m?c={index}&n={n}", headers=ONLY_IF_CACHED) for n in range(128)
            ]
            seen += await settled(client, streams, within=30)
        grown = memory(pid)["VmRSS"] - idle
        figures = await samples(node.api)
    finally:
        for client in clients:
            await client.close()
    assert seen.count(504) == cap and seen.count("refused") == connections * 128 - cap
    assert figures["cdn_proxy_http2_streams_open"] == cap
    # About 7 KiB a stream held (decision 0057): 0.9 MiB for the cap, 14 MiB for all.
    assert grown < 5 * MIB, grown // KIB
