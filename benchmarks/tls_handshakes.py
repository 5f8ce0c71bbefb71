"""New TLS connections per second through ``cdn-proxy serve``: each one a handshake, one GET
of a cached 1 KiB object, and its close. What the hit benchmarks (keep-alive) leave out:
the cost of accepting a TLS connection (decision 0018).

    .venv/bin/python -m benchmarks.tls_handshakes [--root DIR] [--batches 5] [--connections 300]

The server runs on core 1 (``taskset``), this client on core 0; connections are made one
after another. ``--root`` runs cdn-proxy from another checkout (``git worktree add``), to
compare a change with what it replaces. The client is Python's ``ssl`` module, so its own
handshake work is in the figure: compare runs with each other, not with other tools.
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

import trustme
from aiohttp import web

ROOT = Path(__file__).resolve().parents[1]
CONFIG = """[edge]
listen = "127.0.0.1:0"
tls_listen = "127.0.0.1:0"
tls_cert = "cert.pem"
tls_key = "key.pem"
[api]
listen = "127.0.0.1:0"
[cache]
max_bytes = "8MiB"
[state]
path = "state.db"
[[domains]]
name = "example.com"
origin = "http://127.0.0.1:{port}"
"""
REQUEST = b"GET /object HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n"


async def origin() -> tuple[web.AppRunner, int]:
    async def page(request: web.Request) -> web.Response:
        return web.Response(body=b"x" * 1024, headers={"Cache-Control": "max-age=600"})

    app = web.Application()
    app.router.add_get("/{tail:.*}", page)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner, int(runner.addresses[0][1])


async def measure(root: Path, batches: int, connections: int) -> list[float]:
    tmp = Path(tempfile.mkdtemp(prefix="tls-handshakes-"))
    ca = trustme.CA()
    cert = ca.issue_cert("example.com")
    cert.private_key_pem.write_to_path(str(tmp / "key.pem"))
    cert.cert_chain_pems[0].write_to_path(str(tmp / "cert.pem"))
    runner, port = await origin()
    (tmp / "proxy.toml").write_text(CONFIG.format(port=port), encoding="utf-8")
    server = await asyncio.create_subprocess_exec(
        "taskset", "-c", "1", sys.executable, "-m", "proxy", "serve",
        "--config", str(tmp / "proxy.toml"),
        cwd=root, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    assert server.stdout is not None
    try:
        addresses: dict[str, str] = {}
        while len(addresses) < 3:  # edge, edge-tls and api, once each listens
            line = (await server.stdout.readline()).decode()
            if not line:
                raise SystemExit("cdn-proxy serve exited before it listened")
            name, _, url = line.strip().partition(" ")
            addresses[name] = url
        tls_port = int(addresses["edge-tls"].rsplit(":", 1)[1])
        context = ssl.create_default_context()
        ca.configure_trust(context)

        async def one() -> None:
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", tls_port, ssl=context, server_hostname="example.com"
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
        server.terminate()
        await server.wait()
        await runner.cleanup()


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
