"""New TLS connections per second through ``cdn-proxy serve``: each one a handshake, one GET
of a cached 1 KiB object, and its close. What the hit benchmarks (keep-alive) leave out:
the cost of accepting a TLS connection (decision 0018).

    .venv/bin/python -m benchmarks.tls_handshakes [--root DIR] [--batches 5] [--connections 300]

The server (benchmarks.tls's config: both listeners, a trustme certificate) runs on core 1,
the benchmark origin and this client on core 0; connections are made one after another. The
client does not verify the certificate (its own work is not what is measured), but it is
Python's ``ssl`` module, so its side of each handshake is in the figure: compare runs with
each other, not with other tools. ``--root`` runs cdn-proxy from another checkout (``git
worktree add``), to compare a change with what it replaces.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import ssl
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.systems import DOMAINS, PYTHON, ROOT, Origin, Server
from benchmarks.tls import listening, tls_config

PATH = "/o/1024/tls-handshakes"
REQUEST = f"GET {PATH} HTTP/1.1\r\nHost: {DOMAINS[0]}\r\nConnection: close\r\n\r\n".encode()


async def measure(root: Path, batches: int, connections: int) -> list[float]:
    with tempfile.TemporaryDirectory(prefix="tls-handshakes-") as name:
        home = Path(name)
        origin = Origin(home, "0", slow_ms=0)
        argv = [PYTHON, "-m", "proxy", "serve", "--config", str(tls_config(home, origin.port))]
        server = Server("cdn-proxy", argv, home / "proxy.log", "1", cwd=root)
        try:
            server.start()
            port = int(listening(server)["edge-tls"].rsplit(":", 1)[1])
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE

            async def one() -> None:
                reader, writer = await asyncio.open_connection(
                    "127.0.0.1", port, ssl=context, server_hostname=DOMAINS[0]
                )
                writer.write(REQUEST)
                answer = await reader.read()
                writer.close()
                if not answer.startswith(b"HTTP/1.1 200"):
                    raise SystemExit(f"not a 200: {answer[:60]!r}")

            await one()  # the fill
            rates = []
            for _ in range(batches):
                started = time.perf_counter()
                for _ in range(connections):
                    await one()
                rates.append(connections / (time.perf_counter() - started))
            return rates
        finally:
            server.stop()
            origin.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--root", type=Path, default=ROOT, help="checkout to run cdn-proxy from")
    parser.add_argument("--batches", type=int, default=5)
    parser.add_argument("--connections", type=int, default=300, help="per batch")
    args = parser.parse_args()
    os.sched_setaffinity(0, {0})
    rates = asyncio.run(measure(args.root, args.batches, args.connections))
    runs = ", ".join(f"{rate:,.0f}" for rate in rates)
    print(f"new TLS connections per second: median {statistics.median(rates):,.0f} ({runs})")
    print(f"({' '.join(sys.argv)}; root {args.root})")


if __name__ == "__main__":
    main()
