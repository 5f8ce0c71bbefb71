"""The edge's longest turn of its event loop while a zero-window HTTP/2 client sends 128
requests at once (issue 32's HTTP/2 soak, decision 0057).

Run: PYTHONPATH=$PWD taskset -c 1 .venv/bin/python -m benchmarks.burst_turns [--rounds 7]

The edge runs in this process (h2c, an answers' budget of 8 MiB a connection, so most of a
burst is refused 503); a task in its loop wakes every 0.5 ms and notes how late it is. A
child process on core 0 is the origin (8 MiB ``no-store`` objects) and the attacker: each
round, one connection with SETTINGS_INITIAL_WINDOW_SIZE 0 sends 128 GETs in one write and
waits for every head. Printed: the longest lateness per round, and the median of the rounds
after the first (the first pays for imports and connections).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import tempfile
from pathlib import Path

from aiohttp import web
from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.events import ResponseReceived, StreamReset
from h2.settings import SettingCodes

from proxy.config.model import parse_config
from proxy.process.service import running

BIG = 8 * 1024 * 1024
STREAMS = 128


async def attack(url: str, round_: int) -> None:
    host, _, port = url.split("://", 1)[1].rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    h2 = H2Connection(H2Configuration(client_side=True))
    h2.initiate_connection()
    h2.update_settings({SettingCodes.INITIAL_WINDOW_SIZE: 0})
    for n in range(STREAMS):
        stream = h2.get_next_available_stream_id()
        fields = [(":method", "GET"), (":path", f"/big?r={round_}&n={n}")]
        fields += [(":scheme", "http"), (":authority", "example.com")]
        h2.send_headers(stream, fields, end_stream=True)
    writer.write(h2.data_to_send())
    heads = 0
    while heads < STREAMS:
        data = await reader.read(65536)
        if not data:
            break
        for event in h2.receive_data(data):
            heads += isinstance(event, ResponseReceived | StreamReset)
        writer.write(h2.data_to_send())
    writer.close()


async def child() -> None:
    """The origin and the attacker: the origin's port on stdout, then a round per line."""
    body = b"x" * BIG

    async def big(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Cache-Control": "no-store"})
        response.content_length = BIG
        await response.prepare(request)
        with contextlib.suppress(ConnectionError):  # the edge closes what it refuses
            for start in range(0, BIG, 1 << 16):
                await response.write(body[start : start + (1 << 16)])
        return response

    app = web.Application()
    app.router.add_get("/{tail:.*}", big)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    print(runner.addresses[0][1], flush=True)
    loop = asyncio.get_running_loop()
    for round_ in range(1000):
        line = (await loop.run_in_executor(None, sys.stdin.readline)).split()
        if not line:
            break
        await attack(line[0], round_)
        print("done", flush=True)
    await runner.cleanup()


async def lateness(loop: asyncio.AbstractEventLoop, done: asyncio.Event) -> float:
    """How late, at most, a wake-up every 0.5 ms came until ``done``: the longest turn."""
    late = 0.0
    while not done.is_set():
        before = loop.time()
        await asyncio.sleep(0.0005)
        late = max(late, loop.time() - before - 0.0005)
    return late


async def measure(rounds: int) -> list[float]:
    attacker = await asyncio.create_subprocess_exec(
        *("taskset", "-c", "0", sys.executable, "-m", "benchmarks.burst_turns", "--child"),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert attacker.stdin is not None and attacker.stdout is not None
    port = int(await attacker.stdout.readline())
    tmp = Path(tempfile.mkdtemp())
    config = parse_config(
        {
            "edge": {
                "listen": "127.0.0.1:0",
                "h2c": True,
                "answers_held_per_connection_bytes": "8MiB",
            },
            "api": {"listen": "127.0.0.1:0"},
            "cache": {"max_bytes": "16MiB", "max_object_bytes": "1MiB"},
            "state": {"path": str(tmp / "state.db")},
            "domains": [{"name": "example.com", "origin": f"http://127.0.0.1:{port}"}],
        },
        base_dir=tmp,
    )
    loop = asyncio.get_running_loop()
    longest: list[float] = []
    async with running(config) as service:
        for _ in range(rounds):
            done = asyncio.Event()
            ticker = asyncio.ensure_future(lateness(loop, done))
            attacker.stdin.write(f"{service.edge_url}\n".encode())
            await attacker.stdout.readline()
            done.set()
            longest.append(await ticker * 1000)
    attacker.stdin.close()
    await attacker.wait()
    return longest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        asyncio.run(child())
        return 0
    longest = asyncio.run(measure(args.rounds))
    print("longest turn per round (ms):", ", ".join(f"{ms:.1f}" for ms in longest))
    print(f"median of rounds 2-{args.rounds}: {statistics.median(longest[1:]):.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
