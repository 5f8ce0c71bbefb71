"""Issue 32, holes 1 and 3 (decision 0045): what HTTP/2 request bodies may hold, against a
real ``cdn-proxy serve`` child spoken to over h2c by the h2 library.

- Hole 1: a stream's body had no share of ``edge.request_buffer_total_bytes`` (the budget
  was found only on HTTP/1.1 connections), and its windows reopened as soon as the bytes
  reached the stream's reader, so one connection of 128 streams buffered 120 MiB under an
  8 MiB budget with ``cdn_proxy_request_buffer_bytes`` at 0.
- Hole 3: the bytes a stream held unread when it ended or was reset were never given back
  to the connection's window: after a few uploads refused before their body was read, no
  body could arrive on the connection at all.
"""

from __future__ import annotations

import asyncio
import re
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from pathlib import Path

import pytest
from h2.events import PingAckReceived
from h2.exceptions import NoSuchStreamError

from tests.edge.h2_support import RawH2
from tests.nodes import Node, write_config
from tests.polling import until
from tests.reliability.bodies_support import metric, raw_origin

KIB = 1024
MIB = 1024 * KIB
HELD = "cdn_proxy_request_buffer_bytes"

pytestmark = pytest.mark.slow  # a node in a child process, and tens of MiB sent to it
UPLOADS = 24  # refused, each holding up to a stream's window (64 KiB) unread: 1.5 MiB


async def start(tmp_path: Path, nodes: list[Node], origin: str, edge: str) -> Node:
    """``cdn-proxy serve`` with h2c on, its log in serve.log (no tracebacks, checked at
    the end of each test)."""
    config = write_config(tmp_path, origin, edge=f"h2c = true\n{edge}")
    node = await Node.start(config, log=tmp_path / "serve.log")
    nodes.append(node)
    return node


def log_of(tmp_path: Path) -> str:
    return (tmp_path / "serve.log").read_text(encoding="utf-8", errors="replace")


async def held_none(node: Node) -> bool:
    return await metric(node.api, HELD) == 0


def rss(node: Node) -> int:
    status = Path(f"/proc/{node.process.pid}/status").read_text()
    match = re.search(r"^VmRSS:\s+(\d+) kB$", status, re.MULTILINE)
    assert match is not None
    return int(match.group(1)) * KIB


def finished(client: RawH2, stream_id: int) -> bool:
    answer = client.answers[stream_id]
    return answer.reset is not None or answer.ended


def sendable(client: RawH2, stream_id: int) -> int:
    """What the windows let the client send on ``stream_id`` now; 0 once it is closed."""
    if finished(client, stream_id):
        return 0
    try:
        return client.h2.local_flow_control_window(stream_id)
    except NoSuchStreamError:  # reset by the edge: h2 has forgotten it
        return 0


def send(client: RawH2, stream_id: int, size: int) -> int:
    """DATA of up to ``size`` bytes on ``stream_id``, as the windows allow now: sent."""
    sent = 0
    while sent < size:
        room = min(sendable(client, stream_id), size - sent, 16 * KIB)
        if room <= 0:
            break
        client.h2.send_data(stream_id, b"u" * room)
        sent += room
    client.flush()
    return sent


async def round_trip(client: RawH2, number: int) -> None:
    """A PING answered: the edge has read (and acknowledged) what was sent before it."""
    data = number.to_bytes(8, "big")
    client.h2.ping(data)
    client.flush()
    async with asyncio.timeout(5):
        while True:
            events = await client.read_events()
            if any(isinstance(e, PingAckReceived) and e.ping_data == data for e in events):
                return
            assert not client.closed, f"the edge closed the connection: {client.goaway}"


async def push(client: RawH2, streams: dict[int, int]) -> None:
    """Send each stream's bytes still due (``streams``: id -> bytes) as the windows allow,
    never ending a stream, until every one is sent, answered or reset, or the edge opens
    no window in two round trips in a row."""
    quiet = 0
    number = 0
    while quiet < 2:
        progress = 0
        for stream_id, due in streams.items():
            sent = send(client, stream_id, due)
            streams[stream_id] = due - sent
            progress += sent
        if all(not due or finished(client, s) for s, due in streams.items()):
            return
        number += 1
        await round_trip(client, number)
        quiet = 0 if progress else quiet + 1


async def test_many_streams_of_large_bodies_on_one_connection_stay_within_the_budget(
    tmp_path: Path, nodes: list[Node]
) -> None:
    """The issue's attack, scaled down: a budget of 4 MiB, one connection, 64 streams each
    announcing 1 MiB and sending 960 KiB without ending. Before: all 60 MiB were buffered,
    RSS grew by as much, and /metrics said 0 bytes held. Now the bodies count against the
    budget (the ones past it are streamed within the upload shares, or refused 503), the
    windows reopen only by what the handlers read, and the process grows by at most the
    budget, the connection window (1 MiB) and a margin for 64 requests in flight."""
    budget = 4 * MIB
    edge = f'request_buffer_total_bytes = "{budget // MIB}MiB"\n'
    async with raw_origin() as origin:
        node = await start(tmp_path, nodes, origin.url, edge)
        client = await RawH2.open(node.edge)
        warm = client.request("/warm", method="POST", body=b"w" * 1000)
        assert (await client.answer(warm)).status == 200
        before = rss(node)
        streams = {}
        for _ in range(64):
            stream_id = client.request(
                "/upload", method="POST", headers=[("content-length", str(MIB))], end=False
            )
            streams[stream_id] = 960 * KIB
        await push(client, streams)
        held = await metric(node.api, HELD)
        grown = rss(node) - before
        assert 0 < held <= budget
        assert await metric(node.api, "cdn_proxy_request_bodies_over_budget_total") > 0
        assert grown < budget + 1 * MIB + 12 * MIB, f"RSS grew by {grown / MIB:.1f} MiB"
        answered = [a.status for a in client.answers.values() if a.status]
        assert set(answered) <= {200, 503}, answered
        await client.close()
        # The connection gone, every body's share of the budget is free again.
        await until(lambda: held_none(node), every=0.05)
    assert "Traceback" not in log_of(tmp_path)


@asynccontextmanager
async def refusing_origin(answer: asyncio.Event) -> AsyncIterator[str]:
    """An origin that reads a request's head and none of its body (a receive buffer of a
    few KiB: the edge soon stops sending it), then, once ``answer`` is set, answers 403
    (a refusal, such as an origin's 401 or 413 after a look at the head); ``/accepted``
    is read whole and answered 200 with its size."""

    connections: set[asyncio.StreamWriter] = set()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.add(writer)
        with suppress(ConnectionError, asyncio.IncompleteReadError):
            head = await reader.readuntil(b"\r\n\r\n")
            if head.startswith(b"POST /accepted "):
                length = re.search(rb"(?i)content-length: (\d+)", head)
                assert length is not None
                body = await reader.readexactly(int(length[1]))
                text = b"%d" % len(body)
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(text), text))
                await writer.drain()
            else:
                await answer.wait()
                writer.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 9\r\n\r\nforbidden")
                await writer.drain()
            while await reader.read(65536):
                pass
        writer.close()

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.bind(("127.0.0.1", 0))
    server = await asyncio.start_server(serve, sock=sock)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.close()
        for writer in connections:
            writer.transport.abort()
        await server.wait_closed()


async def test_uploads_refused_before_their_body_was_read_give_the_window_back(
    tmp_path: Path, nodes: list[Node]
) -> None:
    """24 uploads on one connection, each streamed to an origin that stops reading it
    and refuses it (403) once the client can send no more: each stream ends with its body
    partly unread. Then a 2 MiB upload on the same connection arrives whole. Before, each
    refusal kept what its stream held unread out of the connection's window (1 MiB), and
    the last upload stalled for want of window."""
    answer = asyncio.Event()
    async with refusing_origin(answer) as origin:
        # Each upload takes a few dozen PING round trips: more than the control-frame burst.
        edge = 'request_buffer_bytes = "16KiB"\nhttp2_control_frame_burst = 100000\n'
        node = await start(tmp_path, nodes, origin, edge)
        client = await RawH2.open(node.edge)
        for _ in range(UPLOADS):
            answer.clear()
            stream_id = client.request(
                "/refused", method="POST", headers=[("content-length", str(8 * MIB))], end=False
            )
            await push(client, {stream_id: 8 * MIB})
            answer.set()
            refused = await client.answer(stream_id)
            assert refused.status == 403, refused
        body = b"a" * (2 * MIB)
        stream_id = client.request(
            "/accepted", method="POST", headers=[("content-length", str(len(body)))], end=False
        )
        await client.send_body(stream_id, body, wait=10)
        accepted = await client.answer(stream_id, wait=10)
        assert (accepted.status, accepted.body) == (200, b"%d" % len(body))
        assert client.goaway is None
        await client.close()
    assert "Traceback" not in log_of(tmp_path)
