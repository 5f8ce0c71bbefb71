"""cdn-proxy with its shared tier on disk, and nginx ``proxy_cache`` on disk, side by side
(issue 23's benchmarks against nginx: benchmarks/shared_hits.py and shared_replay.py).

Both sit in front of the same origin (benchmarks/origin.py, which counts requests and body
bytes), each configured in a directory of the run's own, listening on loopback only:

- cdn-proxy: ``python -m proxy serve``, one process (``workers = 1``), ``[cache] disk_path``
  and ``disk_max_bytes``; its memory tier is given ``memory_bytes`` (small, so that what is
  measured is the shared tier: the memory tier keeps only objects up to an eighth of it);
- nginx 1.22: ``worker_processes 1``, ``proxy_cache_path`` on a directory with ``max_size``,
  ``proxy_cache_lock on``, upstream keep-alive; ``sendfile`` as asked (nginx's default is off).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks import load
from benchmarks.systems import (
    PYTHON,
    ROOT,
    Server,
    children,
    cmdline,
    find_binary,
    free_port,
    proxy_addresses,
    wait_for_port,
)

HOST = "h.example"

NGINX_DISK = """\
worker_processes 1;
daemon off;
pid {home}/nginx.pid;
error_log {home}/error.log error;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    keepalive_requests 1000000;
    sendfile {sendfile};
    client_body_temp_path {home}/tmp/body;
    proxy_temp_path {home}/tmp/proxy;
    fastcgi_temp_path {home}/tmp/fastcgi;
    uwsgi_temp_path {home}/tmp/uwsgi;
    scgi_temp_path {home}/tmp/scgi;
    proxy_cache_path {home}/cache {levels} keys_zone=disk:64m max_size={max_size}
        inactive=1d use_temp_path=off {manager};
    upstream origin {{ server 127.0.0.1:{origin}; keepalive 16; }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://origin;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $host;
            proxy_cache disk;
            proxy_cache_key $host$request_uri;
            proxy_cache_lock on;
            proxy_buffering on;
            add_header X-Cache $upstream_cache_status;
        }}
    }}
}}
"""

# The cache manager's pace (nginx 1.11.5+): how many files one pass removes at most, how long
# a pass may run, and how long it sleeps between passes. nginx's defaults are 100, 200ms, 50ms.
MANAGER_DEFAULT = ""


@dataclass
class Started:
    """A cache we started: its server (a process group), the edge port, the process that
    serves hits (nginx's worker, cdn-proxy's only process), and its cache directory."""

    name: str
    server: Server
    port: int
    hit_pid: int
    cache_dir: Path
    api_port: int = 0

    def stop(self) -> None:
        self.server.stop()


def start_origin(home: Path, cpu: str) -> tuple[Server, int]:
    port = free_port()
    argv = [PYTHON, "-m", "benchmarks.origin", "--port", str(port), "--slow-ms", "0"]
    server = Server("origin", argv, home / "origin.log", cpu)
    server.start()
    wait_for_port(server, port)
    return server, port


async def origin_counts(port: int) -> tuple[int, int]:
    """(requests, body bytes) the origin served since its last reset."""
    requests = await load.get(port, "/__origin/count", "127.0.0.1")
    sent = await load.get(port, "/__origin/bytes", "127.0.0.1")
    return int(requests.body), int(sent.body)


def start_ours(
    home: Path,
    origin_port: int,
    cpu: str,
    *,
    memory_bytes: int,
    disk_bytes: int,
    max_object: int,
    workers: int = 1,
    sendfile: bool = False,
) -> Started:
    home.mkdir(parents=True, exist_ok=True)
    config = home / "proxy.toml"
    config.write_text(
        '[edge]\nlisten = "127.0.0.1:0"\n'
        + (f"workers = {workers}\n" if workers > 1 else "")
        + '\n[api]\nlisten = "127.0.0.1:0"\n\n'
        f"[cache]\nmax_bytes = {memory_bytes}\nmax_object_bytes = {max_object}\n"
        f'disk_path = "cache"\ndisk_max_bytes = {disk_bytes}\n'
        + ("sendfile = true\n" if sendfile else "")
        + '\n[state]\npath = "state.db"\n\n'
        f'[[domains]]\nname = "{HOST}"\norigin = "http://127.0.0.1:{origin_port}"\n'
    )
    argv = [PYTHON, "-m", "proxy", "serve", "--config", str(config)]
    server = Server("cdn-proxy", argv, home / "proxy.log", cpu, cwd=ROOT)
    server.start()
    port, api_port = proxy_addresses(server, 60.0)
    return Started("cdn-proxy", server, port, server.pid, home / "cache", api_port)


def start_nginx(
    home: Path,
    origin_port: int,
    cpu: str,
    *,
    max_size: int,
    sendfile: bool = False,
    manager: str = MANAGER_DEFAULT,
    levels: str = "levels=1:2",
    name: str = "nginx",
) -> Started:
    for sub in ("tmp", "cache"):
        (home / sub).mkdir(parents=True, exist_ok=True)
    # Run as root, nginx's worker drops to an unprivileged user: let it reach the cache (the
    # run's temporary directory, ``home``'s parent, included).
    for path in (home.parent, home, home / "tmp", home / "cache"):
        path.chmod(0o755)
    port = free_port()
    conf = home / "nginx.conf"
    conf.write_text(
        NGINX_DISK.format(
            home=home,
            port=port,
            origin=origin_port,
            max_size=max_size,
            sendfile="on" if sendfile else "off",
            manager=manager,
            levels=levels,
        )
    )
    binary = find_binary("nginx") or "nginx"
    server = Server(name, [binary, "-c", str(conf)], home / "stdout.log", cpu)
    server.start()
    wait_for_port(server, port)
    return Started(name, server, port, nginx_worker(server), home / "cache")


def nginx_worker(server: Server, timeout: float = 10.0) -> int:
    """nginx's worker process (the master may still be starting it when the port opens)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pid in children(server.pid):
            if "worker process" in cmdline(pid):
                return pid
        time.sleep(0.05)
    raise RuntimeError("no nginx worker process")


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of a process (all its threads) so far, from /proc/PID/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def disk_usage(directory: Path, block: int = 4096) -> int:
    """Bytes the files under ``directory`` count against nginx's ``max_size``: each file's
    size rounded up to the file-system block, as nginx records it when it stores the file
    (``ngx_file_fs_size`` then: the blocks that the file system adds later for its own
    metadata, which ``st_blocks`` shows, are not in nginx's count)."""
    total = 0
    for dirpath, _, files in os.walk(directory):
        for name in files:
            try:
                size = os.stat(os.path.join(dirpath, name)).st_size
            except FileNotFoundError:  # removed by a cache manager meanwhile
                continue
            total += -(-size // block) * block
    return total
