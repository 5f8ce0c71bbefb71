"""HTTP/2 hits: cdn-proxy against nginx, both over TLS with the same certificate and object.

Run: .venv/bin/python -m benchmarks.http2 [--runs 3] [--duration 5] [--size 1024]

One ``cdn-proxy serve`` (TLS listener, ALPN h2 and http/1.1) and one nginx (``listen ... ssl
http2``: Debian 12's nginx 1.22 spells ``http2 on`` so; ``proxy_cache`` as in
benchmarks/systems.py), each pinned to ``--server-cpu`` and run one after the other, serve
one cacheable object of ``--size`` bytes from the benchmark origin. h2load (pinned to
``--load-cpu``) asks for it with ``-c 32 -m 10`` (32 connections, 10 streams at once on
each) over HTTP/2, and with ``--h1 -c 32`` over HTTP/1.1 on TLS, for ``--duration`` seconds
after a one-second warm-up, ``--runs`` times each. For each it prints the median req/s and
the CPU per hit: the server's user+system time (/proc, nginx's worker) over the run divided
by the requests it answered. Connections are opened once: the handshakes are not measured,
and neither server closes them after a number of requests (``http2_max_requests`` 1000000
on both: h2load does not reconnect a connection that got GOAWAY, and before session 28 each
of cdn-proxy's stopped after its 1000th request, its default). The CPU includes h2load's
one-second warm-up, whose requests are not counted: every figure is about (duration + 1) /
duration times its true value, for every system alike.

``--layers N`` measures the frame layers alone, in this process, with no server or socket
(decision 0036, "Our own frame layer"): h2's server state machine (as the edge used it)
and the edge's own (proxy/edge/h2/machine.py) are each fed the same bytes, h2load's
requests as the h2 library writes them, 10 to a read, and answer each request with a hit's
fields and a 1 KiB DATA frame ending the stream; printed: CPU µs per request and answer,
the median of 5 runs of N requests.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.systems import (
    DOMAINS,
    PYTHON,
    Origin,
    Server,
    children,
    cmdline,
    find_binary,
    free_port,
    wait_for_port,
)
from benchmarks.tls import listening, tls_config

HOST = DOMAINS[0]

NGINX_H2 = """\
worker_processes 1;
daemon off;
pid {home}/nginx.pid;
error_log {home}/error.log error;
events {{ worker_connections 8192; }}
http {{
    access_log off;
    keepalive_requests 1000000;
    http2_max_requests 1000000;
    client_body_temp_path {home}/tmp/body;
    proxy_temp_path {home}/tmp/proxy;
    fastcgi_temp_path {home}/tmp/fastcgi;
    uwsgi_temp_path {home}/tmp/uwsgi;
    scgi_temp_path {home}/tmp/scgi;
    proxy_cache_path {home}/cache levels=1:2 keys_zone=bench:64m use_temp_path=off;
    upstream origin {{ server 127.0.0.1:{origin}; keepalive 64; }}
    server {{
        listen 127.0.0.1:{port} ssl http2;
        ssl_certificate {pem};
        ssl_certificate_key {pem};
        ssl_protocols TLSv1.2 TLSv1.3;
        server_name {host};
        location / {{
            proxy_pass http://origin;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $host;
            proxy_cache bench;
            proxy_cache_key $host$request_uri;
            proxy_cache_lock on;
        }}
    }}
}}
"""


@dataclass
class Run:
    rps: float
    requests: int
    cpu_us_per_hit: float


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of a process and its threads so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def h2load(url: str, path: str, seconds: int, cpu: str, *, h1: bool) -> list[str]:
    argv = ["taskset", "-c", cpu, "h2load", "-c", "32", "-t", "1"]
    argv += ["--h1"] if h1 else ["-m", "10"]
    argv += ["-D", str(seconds), "--warm-up-time", "1", "-H", f":authority: {HOST}"]
    return [*argv, url + path]


def run_h2load(argv: list[str], pid: int) -> Run:
    before = cpu_seconds(pid)
    out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
    used = cpu_seconds(pid) - before
    done = re.search(r"requests: \d+ total, \d+ started, (\d+) done, (\d+) succeeded", out)
    rate = re.search(r"finished in [\d.]+\w+, ([\d.]+) req/s", out)
    codes = re.search(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", out)
    if done is None or rate is None or codes is None:
        raise RuntimeError(f"h2load said:\n{out}")
    requests = int(done.group(2))
    if int(codes.group(1)) != requests or not requests:
        raise RuntimeError(f"not every answer was a 2xx:\n{out}")
    return Run(float(rate.group(1)), requests, used / requests * 1e6)


def start_nginx(home: Path, pem: Path, origin_port: int, cpu: str) -> tuple[Server, int]:
    for sub in ("tmp", "cache"):
        (home / sub).mkdir(parents=True)
    for path in (home, home / "tmp", home / "cache"):
        path.chmod(0o755)
    port = free_port()
    conf = home / "nginx.conf"
    conf.write_text(NGINX_H2.format(home=home, pem=pem, origin=origin_port, port=port, host=HOST))
    server = Server("nginx", [find_binary("nginx") or "nginx", "-c", str(conf)], home / "log", cpu)
    server.start()
    wait_for_port(server, port)
    return server, port


def worker_of(server: Server, timeout: float = 10.0) -> int:
    """nginx's worker (the master may still be starting it when the port opens)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pid in children(server.pid):
            if "worker process" in cmdline(pid):
                return pid
        time.sleep(0.05)
    raise RuntimeError("no nginx worker process")


def measure_system(url: str, pid: int, path: str, args: argparse.Namespace) -> dict[str, Run]:
    subprocess.run(h2load(url, path, 1, args.load_cpu, h1=False), check=True, capture_output=True)
    runs: dict[str, list[Run]] = {"h2": [], "h1": []}
    for number in range(args.runs):
        for kind in ("h2", "h1") if number % 2 == 0 else ("h1", "h2"):
            argv = h2load(url, path, args.duration, args.load_cpu, h1=kind == "h1")
            runs[kind].append(run_h2load(argv, pid))
    return {kind: _median(values) for kind, values in runs.items()}


def _median(runs: list[Run]) -> Run:
    return Run(
        statistics.median(r.rps for r in runs),
        sum(r.requests for r in runs),
        statistics.median(r.cpu_us_per_hit for r in runs),
    )


def measure(args: argparse.Namespace) -> None:
    path = f"/o/{args.size}/h2-bench"
    results: dict[str, dict[str, Run]] = {}
    commands: list[str] = []
    with tempfile.TemporaryDirectory(prefix="h2-bench-") as name:
        home = Path(name)
        home.chmod(0o755)
        origin = Origin(home, args.load_cpu, slow_ms=50)
        config = tls_config(home, origin.port)
        # As nginx's http2_max_requests above: h2load opens its connections once, and
        # one that gets GOAWAY after 1000 requests (the default) is not opened again.
        text = config.read_text().replace("[edge]\n", "[edge]\nhttp2_max_requests = 1000000\n", 1)
        config.write_text(text)
        try:
            argv = [PYTHON, "-m", "proxy", "serve", "--config", str(config)]
            proxy = Server("cdn-proxy", argv, home / "proxy.log", args.server_cpu)
            proxy.start()
            try:
                url = listening(proxy)["edge-tls"]
                results["cdn-proxy"] = measure_system(url, proxy.pid, path, args)
                commands.append(proxy.command)
            finally:
                proxy.stop()
            nginx, port = start_nginx(
                home / "nginx", home / "edge.pem", origin.port, args.server_cpu
            )
            try:
                url = f"https://127.0.0.1:{port}"
                results["nginx"] = measure_system(url, worker_of(nginx), path, args)
                commands.append(nginx.command)
            finally:
                nginx.stop()
        finally:
            origin.stop()
    print(f"hits of {args.size} B over TLS, {args.runs} runs of {args.duration} s each")
    print(f"{'system':<10} {'protocol':<9} {'req/s':>9} {'CPU µs/hit':>11}")
    for system, runs in results.items():
        for kind, run in runs.items():
            label = "HTTP/2" if kind == "h2" else "HTTP/1.1"
            print(f"{system:<10} {label:<9} {run.rps:>9,.0f} {run.cpu_us_per_hit:>11.1f}")
    print("commands:")
    for command in commands:
        print("  " + command)
    for kind in ("h2", "h1"):
        print(
            "  "
            + shlex.join(
                h2load("https://HOST:PORT", path, args.duration, args.load_cpu, h1=kind == "h1")
            )
        )


HIT_FIELDS = [
    (b":status", b"200"),
    (b"cache-control", b"max-age=60"),
    (b"content-type", b"application/octet-stream"),
    (b"content-length", b"1024"),
    (b"date", b"Thu, 26 Nov 2026 10:00:00 GMT"),
    (b"via", b"1.1 cdn-proxy"),
    (b"cache-status", b"cdn-proxy; hit"),
]
H2LOAD_HEAD = [
    (":method", "GET"),
    (":scheme", "https"),
    (":authority", HOST),
    (":path", "/o/1024/h2-bench"),
    ("user-agent", "h2load nghttp2/1.52.0"),
]


def client_reads(requests: int, *, distinct: bool) -> tuple[bytes, list[bytes]]:
    """What a client sends: its preface, then ``requests`` requests 10 to a read (HPACK as
    h2 and nghttp2 encode them), each read with a WINDOW_UPDATE giving back the connection
    window the answers used; ``distinct``: each request for a path of its own (a block that
    changes the HPACK table each time)."""
    from h2.settings import SettingCodes
    from hpack import Encoder
    from hyperframe.frame import HeadersFrame, SettingsFrame, WindowUpdateFrame

    from proxy.edge.h2.frames import PREFACE

    settings = SettingsFrame(0, settings={SettingCodes.INITIAL_WINDOW_SIZE: 2**30})
    preface = PREFACE + settings.serialize()
    encoder, reads, stream_id = Encoder(), [], 1
    for number in range(requests // 10):
        frames = []
        for one in range(10):
            head = H2LOAD_HEAD
            if distinct:
                head = [*H2LOAD_HEAD[:3], (":path", f"/o/1024/{number}-{one}"), H2LOAD_HEAD[4]]
            flags = {"END_HEADERS", "END_STREAM"}
            frames.append(HeadersFrame(stream_id, data=encoder.encode(head), flags=flags))
            stream_id += 2
        frames.append(WindowUpdateFrame(0, window_increment=10 * 1024))
        reads.append(b"".join(frame.serialize() for frame in frames))
    return preface, reads


def h2_layer(preface: bytes, reads: list[bytes]) -> float:
    """h2's state machine as the edge used it (decision 0036: outbound checks off)."""
    from h2.config import H2Configuration
    from h2.connection import H2Connection
    from h2.events import RequestReceived

    server = H2Connection(
        H2Configuration(
            client_side=False,
            header_encoding=None,
            validate_outbound_headers=False,
            normalize_outbound_headers=False,
        )
    )
    server.initiate_connection()
    server.increment_flow_control_window(2**20)
    server.receive_data(preface)
    body = b"x" * 1024
    started = time.process_time()
    for data in reads:
        for event in server.receive_data(data):
            if isinstance(event, RequestReceived):
                server.send_headers(event.stream_id, [*HIT_FIELDS, (b"age", b"3")])
                server.send_data(event.stream_id, body, end_stream=True)
        server.data_to_send()
    return time.process_time() - started


def own_layer(preface: bytes, reads: list[bytes]) -> float:
    """The edge's frame layer: the machine, a hit's cached block with Age, one call."""
    from proxy.edge.h2.events import RequestReceived
    from proxy.edge.h2.frames import age_field, encode_block
    from proxy.edge.h2.limits import H2Limits
    from proxy.edge.h2.machine import ServerMachine

    server = ServerMachine(H2Limits(max_requests=10**9))
    server.initiate()
    server.receive(preface)
    block, body = encode_block(HIT_FIELDS), b"x" * 1024
    started = time.process_time()
    for data in reads:
        for event in server.receive(data):
            if isinstance(event, RequestReceived):
                server.send_answer(event.stream_id, block + age_field(b"3"), body)
        server.data_to_send()
    return time.process_time() - started


def measure_layers(requests: int) -> None:
    print(f"frame layers alone: CPU µs per request and 1 KiB answer, median of 5 x {requests}")
    print(f"{'layer':<6} {'one path':>9} {'a path each':>12}")
    for name, layer in (("h2", h2_layer), ("own", own_layer)):
        figures = []
        for distinct in (False, True):
            times = []
            for _ in range(5):
                preface, reads = client_reads(requests, distinct=distinct)
                times.append(layer(preface, reads) / requests * 1e6)
            figures.append(statistics.median(times))
        print(f"{name:<6} {figures[0]:>6.1f} µs {figures[1]:>9.1f} µs")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--duration", type=int, default=5, help="seconds per h2load run")
    parser.add_argument("--size", type=int, default=1024, help="bytes of the cached object")
    parser.add_argument("--server-cpu", default="1")
    parser.add_argument("--load-cpu", default="0")
    parser.add_argument("--layers", type=int, default=0, help="requests: frame layers alone")
    args = parser.parse_args()
    if args.layers:
        measure_layers(args.layers)
    else:
        measure(args)


if __name__ == "__main__":
    main()
