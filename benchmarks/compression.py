"""CPU and bytes per compressed hit: cdn-proxy with ``compress = ["br", "gzip"]`` against
nginx ``gzip on``, in the same run (issue 26 §2, decision 0035).

Run: .venv/bin/python -m benchmarks.compression [--runs 3] [--duration 5]

The object is an HTML page made from this repository's README (about 60 KB), served by a
static nginx origin (gzip off) on the load core. Both caches run on the server core with one
process serving hits: cdn-proxy (``workers = 1``) stores the page once per coding on its fill;
nginx (``proxy_cache`` + ``gzip on``, ``gzip_comp_level`` 1, its default) caches the identity
page and compresses it again on every hit. wrk (``-t1 -c32``, keep-alive, load core) asks for
it with ``Accept-Encoding: gzip``, ``br`` (cdn-proxy only: Debian's nginx has no brotli) and
none. CPU per hit is the server's user+sys time (/proc/PID/stat, the process and its
children) over the run divided by the requests; bytes per hit are one answer's head and body
as read from a socket. Each figure is the median of ``--runs``.
"""

from __future__ import annotations

import argparse
import asyncio
import html
import os
import shlex
import statistics
import tempfile
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path

from benchmarks import wrk
from benchmarks.systems import (
    PYTHON,
    ROOT,
    Server,
    children,
    find_binary,
    free_port,
    proxy_addresses,
    wait_for_port,
)

HOST = "h.example"
PATH = "/page.html"
ENCODINGS = {"gzip": "gzip", "br": "br", "identity": None}

ORIGIN_CONF = """\
worker_processes 1;
daemon off;
pid {home}/origin.pid;
error_log {home}/origin-error.log error;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    default_type text/html;
    client_body_temp_path {home}/tmp/obody;
    proxy_temp_path {home}/tmp/oproxy;
    fastcgi_temp_path {home}/tmp/ofastcgi;
    uwsgi_temp_path {home}/tmp/ouwsgi;
    scgi_temp_path {home}/tmp/oscgi;
    server {{
        listen 127.0.0.1:{port};
        root {home}/www;
        add_header Cache-Control "public, max-age=86400";
    }}
}}
"""

EDGE_CONF = """\
worker_processes 1;
daemon off;
pid {home}/edge.pid;
error_log {home}/edge-error.log error;
events {{ worker_connections 8192; }}
http {{
    access_log off;
    keepalive_requests 1000000;
    client_body_temp_path {home}/tmp/body;
    proxy_temp_path {home}/tmp/proxy;
    fastcgi_temp_path {home}/tmp/fastcgi;
    uwsgi_temp_path {home}/tmp/uwsgi;
    scgi_temp_path {home}/tmp/scgi;
    proxy_cache_path {home}/cache levels=1:2 keys_zone=z:64m inactive=1d use_temp_path=off;
    upstream origin {{ server 127.0.0.1:{origin}; keepalive 16; }}
    server {{
        listen 127.0.0.1:{port};
        gzip on;
        gzip_vary on;
        gzip_proxied any;
        location / {{
            proxy_pass http://origin;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Accept-Encoding "";
            proxy_cache z;
            proxy_cache_key $host$request_uri;
        }}
    }}
}}
"""


def page() -> bytes:
    """An HTML page of real text: the README, escaped, in a <pre>."""
    text = html.escape((ROOT / "README.md").read_text())
    return f"<!doctype html><html><body><pre>{text}</pre></body></html>\n".encode()


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of the process and its children so far."""
    total = 0
    for each in (pid, *children(pid)):
        fields = Path(f"/proc/{each}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


async def answer_bytes(port: int, coding: str | None) -> tuple[int, str]:
    """Bytes of one answer (head and body) and its Content-Encoding."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    accept = f"Accept-Encoding: {coding}\r\n" if coding else ""
    writer.write(
        f"GET {PATH} HTTP/1.1\r\nHost: {HOST}\r\n{accept}Connection: close\r\n\r\n".encode()
    )
    raw = await reader.read()
    writer.close()
    await writer.wait_closed()
    head = raw.partition(b"\r\n\r\n")[0].decode().lower()
    encoding = "identity"
    for line in head.split("\r\n"):
        if line.startswith("content-encoding:"):
            encoding = line.split(":", 1)[1].strip()
    return len(raw), encoding


def wrk_argv(port: int, coding: str | None, seconds: int, cpu: str) -> list[str]:
    argv = ["taskset", "-c", cpu, wrk.wrk_binary() or "wrk", "-t1", "-c32", f"-d{seconds}s"]
    argv += ["--latency", "-H", f"Host: {HOST}"]
    if coding:
        argv += ["-H", f"Accept-Encoding: {coding}"]
    return [*argv, f"http://127.0.0.1:{port}{PATH}"]


def start_origin(home: Path, files: Mapping[str, bytes], cpu: str) -> tuple[Server, int]:
    """The static nginx origin (``ORIGIN_CONF``: gzip off) serving ``files`` (name: body) from
    ``home``/www, on ``cpu``, with the directories nginx wants (``tmp``, ``cache``, ``www``),
    readable by its workers (another user). Returns it and its port."""
    for sub in ("tmp", "cache", "www"):
        (home / sub).mkdir(parents=True, exist_ok=True)
    for directory in (home, home / "tmp", home / "cache", home / "www"):
        directory.chmod(0o755)
    for name, body in files.items():
        (home / "www" / name).write_bytes(body)
        (home / "www" / name).chmod(0o644)
    port = free_port()
    (home / "origin.conf").write_text(ORIGIN_CONF.format(home=home, port=port))
    nginx = find_binary("nginx") or "nginx"
    origin = Server("origin", [nginx, "-c", str(home / "origin.conf")], home / "o.log", cpu)
    origin.start()
    wait_for_port(origin, port)
    return origin, port


def run_in_home(
    measure: Callable[[argparse.Namespace, Path], Awaitable[None]],
    args: argparse.Namespace,
    prefix: str,
) -> None:
    """``measure(args, home)`` in a temporary directory, removed after it."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        asyncio.run(measure(args, Path(tmp)))


def start_servers(home: Path, server_cpu: str, load_cpu: str) -> dict[str, tuple[Server, int]]:
    nginx = find_binary("nginx") or "nginx"
    origin, origin_port = start_origin(home, {PATH.lstrip("/"): page()}, load_cpu)
    nginx_port = free_port()
    edge = EDGE_CONF.format(home=home, port=nginx_port, origin=origin_port)
    (home / "edge.conf").write_text(edge)
    (home / "proxy.toml").write_text(
        '[edge]\nlisten = "127.0.0.1:0"\n\n[api]\nlisten = "127.0.0.1:0"\n\n'
        '[cache]\nmax_bytes = "1GiB"\n\n[state]\npath = "state.db"\n\n'
        f'[[domains]]\nname = "{HOST}"\norigin = "http://127.0.0.1:{origin_port}"\n'
        'compress = ["br", "gzip"]\n'
    )
    argv = [PYTHON, "-m", "proxy", "serve", "--config", str(home / "proxy.toml")]
    ours = Server("cdn-proxy", argv, home / "proxy.log", server_cpu)
    ours.start()
    ours_port, _ = proxy_addresses(ours)
    edge_nginx = Server("nginx", [nginx, "-c", str(home / "edge.conf")], home / "e.log", server_cpu)
    edge_nginx.start()
    wait_for_port(edge_nginx, nginx_port)
    return {
        "origin": (origin, origin_port),
        "cdn-proxy": (ours, ours_port),
        "nginx": (edge_nginx, nginx_port),
    }


def hit_pid(name: str, server: Server) -> int:
    """The process that serves hits: nginx's worker, cdn-proxy's serve process."""
    if name == "nginx":
        return children(server.pid)[0]
    return server.pid


async def measure(args: argparse.Namespace, home: Path) -> None:
    servers = start_servers(home, args.server_cpu, args.load_cpu)
    try:
        rows: list[str] = []
        commands = [servers[name][0].command for name in ("origin", "cdn-proxy", "nginx")]
        for name in ("cdn-proxy", "nginx"):
            server, port = servers[name]
            for label, coding in ENCODINGS.items():
                if name == "nginx" and label == "br":
                    continue
                size, served = await answer_bytes(port, coding)  # the fill, then a hit
                size, served = await answer_bytes(port, coding)
                per_hit: list[float] = []
                rates: list[float] = []
                argv = wrk_argv(port, coding, args.duration, args.load_cpu)
                for _ in range(args.runs):
                    pid = hit_pid(name, server)
                    before = cpu_seconds(pid)
                    result = await wrk.run(argv)
                    spent = cpu_seconds(pid) - before
                    per_hit.append(spent / result.requests * 1e6)
                    rates.append(result.rps)
                commands.append(shlex.join(argv))
                rows.append(
                    f"| {name} | {label} | {served} | {size:,} | "
                    f"{statistics.median(rates):,.0f} | {statistics.median(per_hit):.1f} |"
                )
        print("| system | client accepts | served | bytes per hit | req/s | CPU µs per hit |")
        print("|---|---|---|---|---|---|")
        print("\n".join(rows))
        print("\ncommands:")
        print("\n".join(commands))
    finally:
        for server, _ in servers.values():
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--duration", type=int, default=5)
    parser.add_argument("--server-cpu", default="1")
    parser.add_argument("--load-cpu", default="0")
    run_in_home(measure, parser.parse_args(), "compression-bench-")


if __name__ == "__main__":
    main()
