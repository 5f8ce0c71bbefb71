"""The memory that trickled request bodies pin in ``cdn-proxy serve`` (issue 24, failure 3).

    .venv/bin/python -m benchmarks.body_trickle [--root DIR] [--connections 300]
        [--edge 'request_buffer_total_bytes = "64MiB"']

The issue's attack: ``--connections`` POSTs from one address, each announcing
``Content-Length: 1048586``, sending 1 MiB of it at once, then nothing more (the issue's one
byte every 50 s adds nothing in the few seconds measured here). The server (one process, on
core 1) is measured before and after: its RSS (VmRSS), once it has stopped growing, and what
the clients were answered: 503 for those refused an upload share, 200 for those streamed to
an origin that answers before the body ends (the benchmark origin does), nothing for those
whose body is held. ``--edge`` adds keys to ``[edge]``; ``--root`` runs cdn-proxy from
another checkout (``git archive``, ``git worktree add``) to compare with the code before.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.systems import (
    DOMAINS,
    PYTHON,
    ROOT,
    Origin,
    Server,
    proxy_addresses,
    rss_bytes,
)

BODY = 1024**2
ANNOUNCED = BODY + 10
MIB = 1024**2


def config(home: Path, origin_port: int, edge: str) -> Path:
    path = home / "proxy.toml"
    path.write_text(
        f'[edge]\nlisten = "127.0.0.1:0"\n{edge}\n[api]\nlisten = "127.0.0.1:0"\n'
        '[cache]\nmax_bytes = "256MiB"\n[state]\npath = "state.db"\n'
        f'[[domains]]\nname = "{DOMAINS[0]}"\norigin = "http://127.0.0.1:{origin_port}"\n'
    )
    return path


async def settled_rss(pid: int, *, quiet: float = 1.0, most: float = 30.0) -> int:
    """The process's RSS once it has not grown for ``quiet`` seconds (at most ``most``)."""
    last, since, ends = rss_bytes(pid), time.monotonic(), time.monotonic() + most
    while time.monotonic() < ends:
        await asyncio.sleep(0.1)
        now = rss_bytes(pid)
        if now > last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            break
    return last


async def trickler(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = (
        f"POST /o/1024/upload HTTP/1.1\r\nHost: {DOMAINS[0]}\r\nContent-Length: {ANNOUNCED}\r\n\r\n"
    ).encode()
    writer.write(head + b"x" * BODY)
    await writer.drain()
    return reader, writer


async def answered(reader: asyncio.StreamReader) -> bytes:
    try:
        async with asyncio.timeout(0.2):
            return await reader.read(12)
    except TimeoutError:
        return b""


async def measure(root: Path, connections: int, edge: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="body-trickle-") as name:
        home = Path(name)
        origin = Origin(home, "0", slow_ms=0)
        argv = [PYTHON, "-m", "proxy", "serve", "--config", str(config(home, origin.port, edge))]
        server = Server("cdn-proxy", argv, home / "proxy.log", "1", cwd=root)
        try:
            server.start()
            edge_port, _ = proxy_addresses(server)
            before = await settled_rss(server.pid)
            clients = [await trickler(edge_port) for _ in range(connections)]
            during = await settled_rss(server.pid)
            answers = await asyncio.gather(*(answered(reader) for reader, _ in clients))
            for _, writer in clients:
                writer.transport.abort()
            after = await settled_rss(server.pid, quiet=2.0)
            server.check_alive()
            return {
                "rss_before_mib": before / MIB,
                "rss_held_mib": during / MIB,
                "growth_mib": (during - before) / MIB,
                "answered_200": sum(a.startswith(b"HTTP/1.1 200") for a in answers),
                "answered_503": sum(a.startswith(b"HTTP/1.1 503") for a in answers),
                "unanswered": answers.count(b""),
                "rss_after_close_mib": after / MIB,
            }
        finally:
            server.stop()
            origin.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, default=ROOT)
    parser.add_argument("--connections", type=int, default=300)
    parser.add_argument("--edge", default="", help="more [edge] keys, as TOML lines")
    args = parser.parse_args()
    figures = asyncio.run(measure(args.root.resolve(), args.connections, args.edge))
    print(f"root={args.root} connections={args.connections} edge={args.edge!r}")
    for key, value in figures.items():
        print(f"  {key}: {value:.1f}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
