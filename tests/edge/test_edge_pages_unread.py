"""The edge's own pages (4xx and 5xx it writes itself: a 504 for only-if-cached, a 503
refusal) to a client that never reads (issue 32 §2, decision 0057): not charged to the
answers' budget, as they hold nothing but their stream, and what a client holds in streams
is bounded by the streams it may open, for send_timeout at most.

- a zero-window HTTP/2 connection that asks for 128 such pages, round after round, holds
  its streams' worth (they are reset after send_timeout) and no more: the edge's RSS after
  ten rounds is what it was after the first;
- an HTTP/1.1 connection that pipelines requests for such pages and never reads is read no
  further once its answers fill the socket: the client's writes stop, and the edge's RSS
  grows by a bounded amount, not by what the client would send.
"""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest

from benchmarks.large_objects import memory
from tests.conftest import Origin
from tests.edge.h2_support import RawH2
from tests.edge.test_answer_budget import statuses, zero_window
from tests.edge.test_answers_held import KIB, MIB, port_of
from tests.nodes import Node, write_config

pytestmark = pytest.mark.slow

ONLY_IF_CACHED = [("cache-control", "only-if-cached")]  # a miss: the edge's own 504
ROUNDS = 10
# Measured: 0.9 MiB for 128 streams held (7 KiB a stream: its state, request and page), and
# 0.56 MiB more after ten rounds than after the first. A leak of each round's streams would
# add 0.9 MiB a round, 8 MiB over the nine rounds.
NOISE = 3 * MIB


async def reset(client: RawH2, streams: list[int], within: float = 30.0) -> None:
    """Until every one of ``streams`` is reset by the edge (its send timeout)."""
    async with asyncio.timeout(within):
        while any(client.answers[s].reset is None for s in streams):
            await client.read_events(within)


async def test_zero_window_pages_hold_their_streams_and_no_more(
    tmp_path: Path, origin: Origin, nodes: list[Node]
) -> None:
    edge = "h2c = true\nsend_timeout = 0.5\nhttp2_max_requests = 2000"  # 1,280 asked
    node = await Node.start(write_config(tmp_path, origin.url, edge=edge))
    nodes.append(node)
    pid = node.process.pid
    client = await zero_window(node.edge)
    held: list[int] = []
    try:
        for round_ in range(ROUNDS):
            streams = [
                client.request(f"/page?r={round_}&n={n}", headers=ONLY_IF_CACHED)
                for n in range(128)
            ]
            assert await statuses(client, streams) == [504] * 128
            held.append(memory(pid)["VmRSS"])  # 128 pages unsent
            await reset(client, streams)
    finally:
        await client.close()
    assert origin.seen == []
    assert max(held) - held[0] < NOISE, [(h - held[0]) // KIB for h in held]


async def test_pipelined_pages_never_read_are_read_no_further(
    tmp_path: Path, origin: Origin, nodes: list[Node]
) -> None:
    node = await Node.start(write_config(tmp_path, origin.url))
    nodes.append(node)
    pid = node.process.pid
    idle = memory(pid)["VmRSS"]
    request = b"GET /page HTTP/1.1\r\nHost: example.com\r\nCache-Control: only-if-cached\r\n\r\n"
    batch = request * 1000
    loop = asyncio.get_running_loop()
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", port_of(node.edge)))
        sock.setblocking(False)
        sent = 0
        with pytest.raises(TimeoutError):  # the edge stops reading: the client's writes stop
            for _ in range(1000):  # 72 MB of requests, if it read them all
                await asyncio.wait_for(loop.sock_sendall(sock, batch), 2)
                sent += len(batch)
        grown = memory(pid)["VmRSS"] - idle
    assert sent < 64 * MIB, sent
    assert grown < 16 * MIB, grown // KIB
    assert origin.seen == []
