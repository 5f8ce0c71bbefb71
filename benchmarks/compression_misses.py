"""CPU per compressed byte on misses: cdn-proxy's copies (made once per object, levels fitted
to the size: decision 0046) against nginx ``gzip on`` (made on every answer), in one run
(issue 32 §5).

Run: .venv/bin/python -m benchmarks.compression_misses [--requests 20] [--sizes 65536,...]

The page is HTML-like text (words drawn from a small vocabulary, as tests/edge/
test_compression.py's ``page``), served by a static nginx origin (gzip off) on the load core.
Each request to cdn-proxy carries a query of its own (a cache-busting attacker: every one is
a miss, and each stored body is compressed once per coding, br and gzip); cdn-proxy runs one
process on the server core. nginx (``gzip_comp_level`` 1, its default, and 6) compresses the
same page on every answer. The CPU of a system is its processes' user+sys time (/proc; a
compressing thread included) over the requests, minus the same requests answered
uncompressed (a domain without ``compress``; ``Accept-Encoding: identity`` for nginx), so the
figure is what compression costs: per request, and per MB of body compressed (cdn-proxy:
per coding made, the bodies the queue refused not counted; they are shown).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
from pathlib import Path

from benchmarks.compression import cpu_seconds, run_in_home, start_origin
from benchmarks.systems import (
    PYTHON,
    Server,
    children,
    find_binary,
    free_port,
    proxy_addresses,
    wait_for_port,
)

NGINX_CONF = """\
worker_processes 1;
daemon off;
pid {home}/edge-{level}.pid;
error_log {home}/edge-{level}-error.log error;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    default_type text/html;
    client_body_temp_path {home}/tmp/b{level};
    proxy_temp_path {home}/tmp/p{level};
    fastcgi_temp_path {home}/tmp/f{level};
    uwsgi_temp_path {home}/tmp/u{level};
    scgi_temp_path {home}/tmp/s{level};
    server {{
        listen 127.0.0.1:{port};
        gzip on;
        gzip_comp_level {level};
        gzip_types text/html;
        location / {{
            proxy_pass http://127.0.0.1:{origin};
            proxy_set_header Accept-Encoding "";
        }}
    }}
}}
"""


def page(size: int, seed: int = 1) -> bytes:
    rng = random.Random(seed)
    words = [f"w{rng.randrange(4000)}" for _ in range(size // 4)]
    return ("<p>" + " ".join(words) + "</p>\n").encode()[:size]


async def fetch(port: int, host: str, path: str, coding: str) -> int:
    """One request on a connection of its own; the body's length."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAccept-Encoding: {coding}\r\n"
        "Connection: close\r\n\r\n".encode()
    )
    raw = await reader.read()
    writer.close()
    await writer.wait_closed()
    return len(raw.partition(b"\r\n\r\n")[2])


async def settled_cpu(pid: int) -> float:
    """The process's CPU seconds once its compressing thread has stopped (no growth for 0.5 s)."""
    last = cpu_seconds(pid)
    while True:
        await asyncio.sleep(0.5)
        now = cpu_seconds(pid)
        if now == last:
            return now
        last = now


async def run(port: int, pid: int, host: str, path: str, coding: str, count: int) -> float:
    before = await settled_cpu(pid)
    for n in range(count):
        await fetch(port, host, f"{path}?n={n}-{time.monotonic_ns()}", coding)
    return (await settled_cpu(pid)) - before


async def refused(port: int) -> int:
    """Bodies the compression queue turned away so far (/metrics)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    raw = (await reader.read()).decode()
    writer.close()
    for line in raw.splitlines():
        if line.startswith("cdn_proxy_compress_refused_total "):
            return int(float(line.split()[1]))
    return 0


async def measure(args: argparse.Namespace, home: Path) -> None:
    nginx = find_binary("nginx") or "nginx"
    sizes = [int(s) for s in args.sizes.split(",")]
    origin, origin_port = start_origin(home, {f"p{s}.html": page(s) for s in sizes}, "0")
    servers = [origin]
    (home / "proxy.toml").write_text(
        '[edge]\nlisten = "127.0.0.1:0"\n\n[api]\nlisten = "127.0.0.1:0"\n\n'
        '[cache]\nmax_bytes = "256MiB"\nmax_object_bytes = "8MiB"\n\n[state]\npath = "state.db"\n\n'
        f'[[domains]]\nname = "c.example"\norigin = "http://127.0.0.1:{origin_port}"\n'
        'compress = ["br", "gzip"]\ncompress_max_bytes = "8MiB"\n\n'
        f'[[domains]]\nname = "i.example"\norigin = "http://127.0.0.1:{origin_port}"\n'
    )
    argv = [PYTHON, "-m", "proxy", "serve", "--config", str(home / "proxy.toml")]
    ours = Server("cdn-proxy", argv, home / "proxy.log", args.server_cpu)
    ours.start()
    servers.append(ours)
    ours_port, api_port = proxy_addresses(ours)
    nginx_ports = {}
    for level in (1, 6):
        port = free_port()
        conf = home / f"edge-{level}.conf"
        conf.write_text(NGINX_CONF.format(home=home, port=port, origin=origin_port, level=level))
        edge = Server(
            f"nginx-{level}", [nginx, "-c", str(conf)], home / f"e{level}.log", args.server_cpu
        )
        edge.start()
        wait_for_port(edge, port)
        servers.append(edge)
        nginx_ports[level] = (edge, port)
    try:
        print(
            "| system | body | requests | compression CPU ms per request | ms per MB compressed |"
        )
        print("|---|---|---|---|---|")
        for size in sizes:
            path = f"/p{size}.html"
            mb = size / 1e6
            plain = await run(ours_port, ours.pid, "i.example", path, "br, gzip", args.requests)
            turned_away = await refused(api_port)
            spent = await run(ours_port, ours.pid, "c.example", path, "br, gzip", args.requests)
            made = args.requests - (await refused(api_port) - turned_away)
            extra = (spent - plain) / args.requests * 1e3
            per_mb = (spent - plain) * 1e3 / max(made, 1) / (2 * mb)  # a br and a gzip copy
            print(
                f"| cdn-proxy br+gzip, fitted ({made} compressed) | {size:,} | {args.requests} "
                f"| {extra:.1f} | {per_mb:.1f} per coding |"
            )
            for level, (edge, port) in nginx_ports.items():
                worker = children(edge.pid)[0]
                plain = await run(port, worker, "n", path, "identity", args.requests)
                spent = await run(port, worker, "n", path, "gzip", args.requests)
                extra = (spent - plain) / args.requests * 1e3
                print(
                    f"| nginx gzip {level} | {size:,} | {args.requests} | {extra:.1f} "
                    f"| {extra / mb:.1f} |"
                )
    finally:
        for server in servers:
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--sizes", default="65536,1048576,4194304")
    parser.add_argument("--server-cpu", default="1")
    run_in_home(measure, parser.parse_args(), "compression-misses-")


if __name__ == "__main__":
    main()
