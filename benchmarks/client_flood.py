"""A second client's success rate while one address holds connections (issue 24, failure 4).

    .venv/bin/python -m benchmarks.client_flood [--root DIR] [--attack 1200] [--requests 300]
        [--edge 'max_connections = 1000']

One ``cdn-proxy serve`` process on core 1, ``[edge] max_connections = 1000`` by default (so
that one client process can reach it). The attacker, bound to 127.0.0.1, opens ``--attack``
connections that send nothing (the header timeout is raised to 60 s so none is closed during
the run); then a second client, bound to 127.0.0.2, makes ``--requests`` GETs of a cached
1 KiB object, each on a new connection. Printed: how many of the attacker's connections the
edge kept (no answer) or refused (503), and the second client's 200s. ``--root`` runs
cdn-proxy from another checkout, to compare with the code before.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path

from benchmarks.systems import DOMAINS, PYTHON, ROOT, Origin, Server, proxy_addresses

PATH = "/o/1024/flood"
REQUEST = f"GET {PATH} HTTP/1.1\r\nHost: {DOMAINS[0]}\r\nConnection: close\r\n\r\n".encode()


def config(home: Path, origin_port: int, edge: str) -> Path:
    path = home / "proxy.toml"
    path.write_text(
        f'[edge]\nlisten = "127.0.0.1:0"\nheader_timeout = 60\n{edge}\n'
        '[api]\nlisten = "127.0.0.1:0"\n[cache]\nmax_bytes = "64MiB"\n'
        '[state]\npath = "state.db"\n'
        f'[[domains]]\nname = "{DOMAINS[0]}"\norigin = "http://127.0.0.1:{origin_port}"\n'
    )
    return path


async def get(port: int, source: str) -> bytes:
    """One GET from ``source`` on a new connection: the status line (b"" if none came)."""
    try:
        async with asyncio.timeout(5):
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", port, local_addr=(source, 0)
            )
            writer.write(REQUEST)
            line = await reader.readline()
            writer.close()
            return line
    except (TimeoutError, ConnectionError):
        return b""


async def first_bytes(reader: asyncio.StreamReader) -> bytes:
    try:
        async with asyncio.timeout(0.5):
            return await reader.read(12)
    except (TimeoutError, ConnectionError):
        return b""


async def measure(root: Path, attack: int, requests: int, edge: str) -> dict[str, int]:
    with tempfile.TemporaryDirectory(prefix="client-flood-") as name:
        home = Path(name)
        origin = Origin(home, "0", slow_ms=0)
        argv = [PYTHON, "-m", "proxy", "serve", "--config", str(config(home, origin.port, edge))]
        server = Server("cdn-proxy", argv, home / "proxy.log", "1", cwd=root)
        held: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        try:
            server.start()
            port, _ = proxy_addresses(server)
            await get(port, "127.0.0.2")  # the object is cached before the attack
            for _ in range(attack):
                held.append(
                    await asyncio.open_connection("127.0.0.1", port, local_addr=("127.0.0.1", 0))
                )
            answers = await asyncio.gather(*(first_bytes(reader) for reader, _ in held))
            lines = [await get(port, "127.0.0.2") for _ in range(requests)]
            server.check_alive()
            return {
                "attacker_kept": answers.count(b""),
                "attacker_refused_503": sum(a.startswith(b"HTTP/1.1 503") for a in answers),
                "second_client_200": sum(line.startswith(b"HTTP/1.1 200") for line in lines),
                "second_client_requests": requests,
            }
        finally:
            for _, writer in held:
                writer.transport.abort()
            server.stop()
            origin.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, default=ROOT)
    parser.add_argument("--attack", type=int, default=1200)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--edge", default="max_connections = 1000")
    args = parser.parse_args()
    figures = asyncio.run(measure(args.root.resolve(), args.attack, args.requests, args.edge))
    print(f"root={args.root} attack={args.attack} edge={args.edge!r}")
    for key, value in figures.items():
        print(f"  {key}: {value}")


if __name__ == "__main__":
    main()
