"""The systems under test: how each is configured, started, cleared, measured and stopped.

Every server runs as its own process group, pinned with ``taskset`` to the server core, with
its configuration generated into the run's temporary directory, listening on loopback only.
``Fleet`` starts the ones asked for and stops every one of them however the run ends.

- ``cdn-proxy``: ``python -m proxy serve`` with a generated TOML config; cleared through the
  clear-cache API with a token created for the run.
- ``floor``: benchmarks/floor.py, not a cache (hit scenario only).
- ``client-cache``: benchmarks/peers/client_cache_proxy.py; cleared by walking every key.
- ``nginx``: ``proxy_cache``, one cache directory per domain; Debian's nginx has no purge
  module, so "clearing" a domain is deleting its cache directory's files.
- ``varnish``: ``varnishd -F`` with malloc storage; cleared by an HTTP BAN handled in VCL
  (a lurker-friendly ``obj.http.x-host`` ban).

Beside them, for the whole-machine and before/after comparisons (not in ``ALL_SYSTEMS``, so
a default run does not start them in its shared fleet):

- ``cdn-proxy-2w``: cdn-proxy with ``[edge] workers = 2`` (a control process, the embedded
  Valkey and two edge worker processes on one port).
- ``nginx-2w``: the nginx configuration above with ``worker_processes 2``.
- ``cdn-proxy-before``: cdn-proxy run from another checkout (``Setting.before_root``).
"""

from __future__ import annotations

import asyncio
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks import load
from benchmarks.ports import free_port as free_port  # re-exported: benchmarks import it here

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
# The environment of a cdn-proxy child started by a benchmark: this checkout's package first,
# and no CLI defaults from the caller's shell.
CHILD_ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    "CDN_PROXY_URL": "",
    "CDN_PROXY_TOKEN": "",
}
DOMAINS = ("h.example", "a.example", "b.example", "c.example", "p.example", "m.example")
ALL_SYSTEMS = ("cdn-proxy", "floor", "client-cache", "nginx", "varnish")
EXTRA_SYSTEMS = ("cdn-proxy-2w", "nginx-2w", "cdn-proxy-before")
CACHES = ("cdn-proxy", "client-cache", "nginx", "varnish")


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def find_binary(name: str) -> str | None:
    return shutil.which(name) or next(
        (str(p) for p in (Path("/usr/sbin") / name, Path("/usr/bin") / name) if p.exists()), None
    )


def missing_reason(system: str) -> str | None:
    """Why a system cannot run here, or None if it can."""
    if system in ("nginx", "nginx-2w") and find_binary("nginx") is None:
        return "nginx is not installed (apt-get install nginx)"
    if system == "varnish" and find_binary("varnishd") is None:
        return "varnishd is not installed (apt-get install varnish)"
    if system == "client-cache":
        try:
            import aiohttp_client_cache  # noqa: F401
        except ImportError:
            return "aiohttp-client-cache is not installed (pip install -e '.[bench]')"
    return None


def rss_bytes(pid: int) -> int:
    """Resident set size of a process, from /proc/PID/status (VmRSS)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces, so split after the last ')'.
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry.name))
    return found


def tree_cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of ``pid`` and its descendants so far (/proc/PID/stat):
    a server's own cost, whatever its process layout (nginx's master and workers, Varnish's
    manager and cache child, a cdn-proxy node's control process and workers)."""
    total = 0.0
    pending = [pid]
    while pending:
        current = pending.pop()
        try:
            stat = Path(f"/proc/{current}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime
        pending += children(current)
    return total


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""


@dataclass
class Server:
    """One process group we started, and the command line that started it."""

    name: str
    argv: list[str]
    log: Path
    cpu: str
    cwd: Path = ROOT  # another checkout runs its own ``proxy`` package (``python -m``)
    popen: subprocess.Popen[bytes] = field(init=False)

    def start(self) -> None:
        with self.log.open("wb") as out:
            self.popen = subprocess.Popen(
                ["taskset", "-c", self.cpu, *self.argv],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                cwd=self.cwd,
            )

    @property
    def command(self) -> str:
        return shlex.join(["taskset", "-c", self.cpu, *self.argv])

    @property
    def pid(self) -> int:
        return self.popen.pid

    def check_alive(self) -> None:
        if self.popen.poll() is not None:
            tail = self.log.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"{self.name} exited with {self.popen.returncode}:\n{tail}")

    def stop(self) -> None:
        """SIGTERM the process group, then SIGKILL whatever is left of it."""
        if not hasattr(self, "popen"):
            return
        with suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGTERM)
        with suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=10)
        with suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        with suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=5)


def wait_for_port(server: Server, port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        server.check_alive()
        with socket.socket() as sock:
            sock.settimeout(0.2)
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"{server.name} did not listen on 127.0.0.1:{port} in {timeout:.0f} s")


@dataclass
class Setting:
    """What every system shares: the run directory, the origin, the cores."""

    tmp: Path
    origin_port: int
    server_cpu: str
    floor_sizes: list[int]
    before_root: Path | None = None  # the checkout cdn-proxy-before runs from


class System:
    """A started system. Subclasses say how to clear a domain and whose memory to read."""

    name = ""
    clear_method = "not supported"

    def __init__(self, setting: Setting, server: Server, port: int) -> None:
        self.setting = setting
        self.server = server
        self.port = port
        self.notes: list[str] = []

    @property
    def command(self) -> str:
        return self.server.command

    def cache_pid(self) -> int:
        return self.server.pid

    def clear_command(self, domain: str) -> str | None:
        return None

    async def clear(self, domain: str) -> float | None:
        """Clear the domain; seconds until the clear was confirmed, or None if unsupported."""
        return None

    def stop(self) -> None:
        self.server.stop()


def proxy_config(home: Path, origin_port: int, workers: int = 1) -> Path:
    """A cdn-proxy config in ``home``: every benchmark domain on the origin, both listeners on
    ports the OS chooses (``proxy_addresses`` reads them back), ``workers`` edge processes."""
    config = home / "proxy.toml"
    domains = "".join(
        f'\n[[domains]]\nname = "{d}"\norigin = "http://127.0.0.1:{origin_port}"\n' for d in DOMAINS
    )
    config.write_text(
        '[edge]\nlisten = "127.0.0.1:0"\n'
        # Written only when above 1: a checkout from before workers existed runs this too.
        + (f"workers = {workers}\n" if workers > 1 else "")
        + '\n[api]\nlisten = "127.0.0.1:0"\n\n'
        '[cache]\nmax_bytes = "8GiB"\nmax_object_bytes = "8MiB"\n\n'
        '[state]\npath = "state.db"\n' + domains
    )
    return config


def create_token(config: Path, root: Path = ROOT) -> str:
    """A token for every domain of the config, made with the CLI of the checkout at ``root``."""
    return subprocess.run(
        [PYTHON, "-m", "proxy", "token", "create", "bench", "--all-domains", "--config", config],
        check=True,
        capture_output=True,
        text=True,
        cwd=root,
    ).stdout.strip()


async def token_command(config: Path, *args: str) -> str:
    """``cdn-proxy token ARGS --config PATH`` in a child process: what it printed (the token,
    for create and regenerate); RuntimeError with its error output if it failed."""
    process = await asyncio.create_subprocess_exec(
        PYTHON,
        *("-m", "proxy", "token", *args, "--config", str(config)),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=CHILD_ENV,
    )
    out, err = await process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"token {' '.join(args)} failed: {err.decode().strip()}")
    return out.decode().strip()


async def wait_listening(
    process: asyncio.subprocess.Process, roles: Iterable[str], *, exited: str
) -> None:
    """Until ``process`` (``cdn-proxy serve``, stdout piped) has printed its address line for
    each of ``roles`` ("edge", "api"); RuntimeError(``exited``) if it ends first. The caller
    bounds the wait."""
    assert process.stdout is not None
    wanted, seen = set(roles), set[str]()
    while not seen.issuperset(wanted):
        line = (await process.stdout.readline()).decode()
        if not line:
            raise RuntimeError(exited)
        seen.add(line.partition(" ")[0])


def proxy_argv(config: Path) -> list[str]:
    return [PYTHON, "-m", "proxy", "serve", "--config", str(config)]


def proxy_addresses(server: Server, timeout: float = 30.0) -> tuple[int, int]:
    """The (edge, api) ports a cdn-proxy started on port 0 printed to its log."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        server.check_alive()
        found = {}
        for line in server.log.read_text(errors="replace").splitlines():
            word, _, url = line.partition(" ")
            if word in ("edge", "api") and url.startswith("http://"):
                found[word] = int(url.rsplit(":", 1)[1])
        if len(found) == 2:
            return found["edge"], found["api"]
        time.sleep(0.05)
    raise RuntimeError("cdn-proxy did not print its edge and api addresses")


def floor_argv(port: int, sizes: list[int]) -> list[str]:
    return [
        PYTHON,
        "-m",
        "benchmarks.floor",
        "--port",
        str(port),
        "--sizes",
        ",".join(map(str, sizes)),
    ]


def client_cache_argv(port: int, origin_port: int, backend: str, tmp: Path) -> list[str]:
    argv = [PYTHON, "-m", "benchmarks.peers.client_cache_proxy", "--port", str(port)]
    argv += ["--origin-port", str(origin_port), "--backend", backend]
    if backend == "sqlite":
        argv += ["--db", str(tmp / "client-cache.sqlite")]
    return argv


class Ours(System):
    name = "cdn-proxy"
    clear_method = "clear-cache API (HTTP POST, token auth, audit row)"
    workers = 1

    def __init__(self, setting: Setting) -> None:
        home = setting.tmp / self.name
        home.mkdir()
        root = self.root(setting)
        config = self.config = proxy_config(home, setting.origin_port, self.workers)
        self.token = create_token(config, root)
        log = home / "serve.log"
        server = Server(self.name, proxy_argv(config), log, setting.server_cpu, cwd=root)
        server.start()
        edge, api = proxy_addresses(server)
        super().__init__(setting, server, edge)
        self.api_port = api
        if self.workers > 1:
            self.notes.append(f"[edge] workers = {self.workers}, embedded Valkey")
        if root != ROOT:
            self.notes.append(f"run from {root}")

    def root(self, setting: Setting) -> Path:
        """The checkout whose ``proxy`` package runs."""
        return ROOT

    def clear_request(self, domain: str) -> tuple[list[tuple[str, str]], bytes]:
        headers = [("Authorization", f"Bearer {self.token}"), ("Content-Type", "application/json")]
        return headers, f'{{"domain": "{domain}"}}'.encode()

    def clear_command(self, domain: str) -> str:
        return (
            f"curl -X POST http://127.0.0.1:{self.api_port}/api/v1/cdn/clear-cache "
            f"-H 'Authorization: Bearer $TOKEN' -H 'Content-Type: application/json' "
            f'-d \'{{"domain": "{domain}"}}\''
        )

    async def clear(self, domain: str) -> float:
        headers, body = self.clear_request(domain)
        conn = await load.Connection.open(self.api_port)
        try:
            start = time.perf_counter()
            reply = await conn.request(
                "POST", "/api/v1/cdn/clear-cache", "127.0.0.1", headers, body
            )
            seconds = time.perf_counter() - start
        finally:
            await conn.close()
        if reply.status != 200 or reply.body.strip() != b"Cache cleared":
            raise RuntimeError(f"clear-cache answered {reply.status}: {reply.body[:200]!r}")
        return seconds


class OursTwoWorkers(Ours):
    name = "cdn-proxy-2w"
    workers = 2


class OursBefore(Ours):
    name = "cdn-proxy-before"

    def root(self, setting: Setting) -> Path:
        if setting.before_root is None:
            raise RuntimeError("cdn-proxy-before needs a checkout to run from (--before DIR)")
        return setting.before_root


class Floor(System):
    name = "floor"

    def __init__(self, setting: Setting) -> None:
        port = free_port()
        argv = floor_argv(port, setting.floor_sizes)
        server = Server(self.name, argv, setting.tmp / "floor.log", setting.server_cpu)
        server.start()
        wait_for_port(server, port)
        super().__init__(setting, server, port)


class ClientCache(System):
    name = "client-cache"
    clear_method = "walk every key, delete the host's (HTTP POST /__clear)"

    def __init__(self, setting: Setting, backend: str = "memory") -> None:
        port = free_port()
        argv = client_cache_argv(port, setting.origin_port, backend, setting.tmp)
        server = Server(self.name, argv, setting.tmp / "client-cache.log", setting.server_cpu)
        server.start()
        wait_for_port(server, port)
        super().__init__(setting, server, port)
        self.notes.append(f"{backend} backend")

    def clear_command(self, domain: str) -> str:
        return f"curl -X POST 'http://127.0.0.1:{self.port}/__clear?host={domain}'"

    async def clear(self, domain: str) -> float:
        conn = await load.Connection.open(self.port)
        try:
            start = time.perf_counter()
            reply = await conn.request("POST", f"/__clear?host={domain}", "127.0.0.1")
            seconds = time.perf_counter() - start
        finally:
            await conn.close()
        if reply.status != 200:
            raise RuntimeError(f"client-cache clear answered {reply.status}")
        return seconds


NGINX_CONF = """\
worker_processes {workers};
daemon off;
pid {home}/nginx.pid;
error_log {home}/error.log error;
events {{ worker_connections 8192; }}
http {{
    access_log off;
    keepalive_requests 1000000;
    client_body_temp_path {home}/tmp/body;
    proxy_temp_path {home}/tmp/proxy;
    fastcgi_temp_path {home}/tmp/fastcgi;
    uwsgi_temp_path {home}/tmp/uwsgi;
    scgi_temp_path {home}/tmp/scgi;
{zones}
    upstream origin {{ server 127.0.0.1:{origin}; keepalive 64; }}
    server {{
        listen 127.0.0.1:{port} default_server;
        return 421;
    }}
{servers}
}}
"""

NGINX_ZONE = (
    "    proxy_cache_path {home}/cache/{domain} levels=1:2 keys_zone={zone}:256m "
    "max_size=16g inactive=1d use_temp_path=off;\n"
)

NGINX_SERVER = """\
    server {{
        listen 127.0.0.1:{port};
        server_name {domain};
        location / {{
            proxy_pass http://origin;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $host;
            proxy_cache {zone};
            proxy_cache_key $host$request_uri;
            proxy_cache_lock on;
            add_header X-Cache $upstream_cache_status;
        }}
    }}
"""


class Nginx(System):
    name = "nginx"
    clear_method = "delete the domain's cache files (no purge in Debian's nginx)"
    workers = 1

    def __init__(self, setting: Setting) -> None:
        home = setting.tmp / self.name
        for sub in ("tmp", "cache"):
            (home / sub).mkdir(parents=True)
        # Run as root, nginx's workers drop to an unprivileged user: let them reach the cache.
        for path in (setting.tmp, home, home / "tmp", home / "cache"):
            path.chmod(0o755)
        port = free_port()
        zones = "".join(
            NGINX_ZONE.format(home=home, domain=d, zone=d.replace(".", "_")) for d in DOMAINS
        )
        servers = "".join(
            NGINX_SERVER.format(port=port, domain=d, zone=d.replace(".", "_")) for d in DOMAINS
        )
        conf = home / "nginx.conf"
        conf.write_text(
            NGINX_CONF.format(
                home=home,
                zones=zones,
                servers=servers,
                origin=setting.origin_port,
                port=port,
                workers=self.workers,
            )
        )
        self.home = home
        binary = find_binary("nginx") or "nginx"
        server = Server(
            self.name, [binary, "-c", str(conf)], home / "stdout.log", setting.server_cpu
        )
        server.start()
        wait_for_port(server, port)
        super().__init__(setting, server, port)
        self.notes.append("proxy_cache_lock on; bodies in files (page cache), index in keys_zone")
        if self.workers > 1:
            self.notes.append(f"worker_processes {self.workers}")

    def cache_pid(self) -> int:
        for pid in children(self.server.pid):
            if "worker process" in cmdline(pid):
                return pid
        raise RuntimeError("no nginx worker process")

    def cache_dir(self, domain: str) -> Path:
        return self.home / "cache" / domain

    def clear_command(self, domain: str) -> str:
        return f"find {self.cache_dir(domain)} -type f -delete"

    async def clear(self, domain: str) -> float:
        argv = ["find", str(self.cache_dir(domain)), "-type", "f", "-delete"]
        start = time.perf_counter()
        process = await asyncio.create_subprocess_exec(*argv)
        if await process.wait() != 0:
            raise RuntimeError(f"{shlex.join(argv)} failed")
        return time.perf_counter() - start

    def disk_bytes(self, domain: str) -> int:
        total = 0
        for dirpath, _, files in os.walk(self.cache_dir(domain)):
            for name in files:
                total += os.stat(os.path.join(dirpath, name)).st_blocks * 512
        return total


VARNISH_VCL = """\
vcl 4.1;
backend origin {{ .host = "127.0.0.1"; .port = "{origin}"; }}
sub vcl_recv {{
    if (req.method == "BAN") {{
        if (client.ip != "127.0.0.1") {{ return (synth(403, "Forbidden")); }}
        ban("obj.http.x-host == " + req.http.host);
        return (synth(200, "Banned"));
    }}
}}
sub vcl_backend_response {{ set beresp.http.x-host = bereq.http.host; }}
sub vcl_deliver {{ unset resp.http.x-host; }}
"""


class NginxTwoWorkers(Nginx):
    name = "nginx-2w"
    workers = 2


class Varnish(System):
    name = "varnish"
    clear_method = "HTTP BAN -> ban(obj.http.x-host == host)"

    def __init__(self, setting: Setting) -> None:
        home = setting.tmp / "varnish"
        home.mkdir()
        vcl = home / "bench.vcl"
        vcl.write_text(VARNISH_VCL.format(origin=setting.origin_port))
        port = free_port()
        binary = find_binary("varnishd") or "varnishd"
        argv = [binary, "-F", "-j", "none", "-a", f"127.0.0.1:{port}", "-T", "none"]
        argv += ["-f", str(vcl), "-n", str(home / "work"), "-s", "malloc,8g"]
        server = Server(self.name, argv, home / "stdout.log", setting.server_cpu)
        server.start()
        wait_for_port(server, port, timeout=60)
        super().__init__(setting, server, port)
        self.notes.append("malloc storage; ban is lazy (objects freed by the ban lurker)")

    def cache_pid(self) -> int:
        for pid in children(self.server.pid):
            if "cache-main" in Path(f"/proc/{pid}/comm").read_text():
                return pid
        raise RuntimeError("no varnish cache-main process")

    def clear_command(self, domain: str) -> str:
        return f"curl -X BAN -H 'Host: {domain}' http://127.0.0.1:{self.port}/"

    async def clear(self, domain: str) -> float:
        conn = await load.Connection.open(self.port)
        try:
            start = time.perf_counter()
            reply = await conn.request("BAN", "/", domain)
            seconds = time.perf_counter() - start
        finally:
            await conn.close()
        if reply.status != 200:
            raise RuntimeError(f"varnish BAN answered {reply.status}")
        return seconds


STARTERS: dict[str, Callable[[Setting], System]] = {
    "cdn-proxy": Ours,
    "floor": Floor,
    "client-cache": ClientCache,
    "nginx": Nginx,
    "varnish": Varnish,
    "cdn-proxy-2w": OursTwoWorkers,
    "nginx-2w": NginxTwoWorkers,
    "cdn-proxy-before": OursBefore,
}


class Origin:
    """The benchmark origin (benchmarks/origin.py), on the load core: idle during hit runs."""

    def __init__(self, tmp: Path, cpu: str, slow_ms: float) -> None:
        self.port = free_port()
        argv = [PYTHON, "-m", "benchmarks.origin", "--port", str(self.port)]
        argv += ["--slow-ms", str(slow_ms)]
        self.server = Server("origin", argv, tmp / "origin.log", cpu)
        self.server.start()
        wait_for_port(self.server, self.port)

    async def count(self) -> int:
        reply = await load.get(self.port, "/__origin/count", "127.0.0.1")
        return int(reply.body)

    async def reset(self) -> None:
        conn = await load.Connection.open(self.port)
        try:
            await conn.request("POST", "/__origin/reset", "127.0.0.1")
        finally:
            await conn.close()

    def stop(self) -> None:
        self.server.stop()


class Fleet:
    """Systems started together; ``stop`` stops all of them (and is safe to call twice)."""

    def __init__(self, setting: Setting, names: list[str]) -> None:
        self.systems: dict[str, System] = {}
        try:
            for name in names:
                self.systems[name] = STARTERS[name](setting)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        for system in self.systems.values():
            system.stop()
        self.systems = {}
