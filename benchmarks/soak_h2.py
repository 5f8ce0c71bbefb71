"""The HTTP/2 soak (issue 32, decision 0051): a real ``cdn-proxy serve`` with h2c on, the
third round's attacks mixed, and a second client's hits timed before and during them.

Run: .venv/bin/python -m benchmarks.soak_h2 [--minutes 2] [--quiet 20] [--out DIR]
         [--server-cpu 1] [--load-cpu 0] [--attacks zero-window,trickle,headers,compress]

(``benchmarks.soak --h2`` mixes the same attacks into the first rounds' soak.)

The node serves one domain, ``h2.soak``, from an origin in this process (``H2Origin``), with
budgets smaller than the defaults (``BUDGETS``), so that the bound means something. For
``--quiet`` seconds only the second client runs (127.0.0.11: an HTTP/2 connection asking a
cached 4 KiB object every 20 ms): its p99 then is the unloaded one. Then, until the end,
each attack from a loopback address of its own, beside the second client:

- **zero-window readers** (127.0.0.7): ``CONNECTIONS`` h2c connections with
  SETTINGS_INITIAL_WINDOW_SIZE 0, each asking 128 distinct 8 MiB ``no-store`` objects and
  reading nothing; each opens again once the edge has closed it;
- **trickled bodies on 128 streams** (127.0.0.8): one connection of 128 POSTs announcing
  1 MiB each, 8 KiB sent on each at once, then a byte a stream every 2 s;
- **large header blocks** (127.0.0.9): twice a second a connection sends one header block
  of a 1 MiB Huffman literal in 16 KiB CONTINUATION frames;
- **compression misses** (127.0.0.10): four a second, a 1 MiB cacheable text with a
  cache-busting query and ``Accept-Encoding: br, gzip``.

Every second the node's RSS (all its processes) and /metrics's budgets are sampled. It
passes when the peak RSS stays under the bound (``rss_bound``: the quiet peak, plus
``cache.max_bytes``, the budgets that the attacks can fill, a connection window (1 MiB) per
attacking HTTP/2 connection, and ``MARGIN``) and the second client's p99 under attack is
within twice its quiet p99. The report (markdown, and ``soak_h2.json``) goes to ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shlex
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import aiohttp
from aiohttp import web
from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.events import (
    ConnectionTerminated,
    DataReceived,
    ResponseReceived,
    StreamEnded,
    StreamReset,
)
from h2.exceptions import ProtocolError
from h2.settings import SettingCodes
from hpack import Encoder

from benchmarks.soak_server import SoakServer

KIB, MIB = 1024, 1024 * 1024
H2_DOMAIN = "h2.soak"
ZERO_WINDOW, TRICKLER, HEADERS, COMPRESSOR, SECOND = (
    "127.0.0.7",
    "127.0.0.8",
    "127.0.0.9",
    "127.0.0.10",
    "127.0.0.11",
)
ATTACKS = ("zero-window", "trickle", "headers", "compress")
CONNECTIONS = 4  # zero-window connections at once
MAX_REQUESTS = 1000  # edge.http2_max_requests: then GOAWAY NO_ERROR
STREAMS = 128
BIG = 8 * MIB
TEXT = 1 * MIB
HOT = 4 * KIB
MARGIN = 64 * MIB  # the allocator's and the interpreter's noise, stated beside the bound
# The node's budgets in this soak (edge keys), smaller than the defaults.
BUDGETS = {
    "request_buffer_total_bytes": 16 * MIB,
    "fill_buffer_total_bytes": 32 * MIB,
    "compress_queue_bytes": 8 * MIB,
    "answers_held_per_connection_bytes": 8 * MIB,
    "answers_held_per_client_bytes": 16 * MIB,
}
EDGE = {"h2c": "true", "send_timeout": "10", "body_timeout": "10", "body_min_rate": "1024"}
GAUGES = (
    "answers_held_bytes",
    "request_buffer_bytes",
    "fill_buffer_bytes",
    "compress_queue_bytes",
    "answers_refused_total",
    "send_timeouts_total",
    "http2_goaways_total",
    "compress_refused_total",
    "fills_over_budget_total",
)
_METRIC = re.compile(r"^cdn_proxy_(\w+?)(?:\{([^}]*)\})? (\S+)$", re.MULTILINE)


def configure(config: Path, origin_url: str) -> None:
    """Turn a soak server's config (benchmarks/soak_server.py) into this soak's: h2c, the
    send and body timeouts, ``BUDGETS``, and the ``h2.soak`` domain with compression."""
    text = config.read_text(encoding="utf-8")
    keys = {**EDGE, **{key: str(value) for key, value in BUDGETS.items()}}
    edge = "".join(f"{key} = {value}\n" for key, value in keys.items())
    text = text.replace("[edge]\n", "[edge]\n" + edge, 1)
    text += (
        f'[[domains]]\nname = "{H2_DOMAIN}"\norigin = "{origin_url}"\nread_timeout = 10\n'
        'compress = ["br", "gzip"]\n'
    )
    config.write_text(text, encoding="utf-8")


def rss_bound(quiet_peak: int, max_bytes: int) -> int:
    """What the node may hold under the attacks: what it held unloaded, its cache, the
    budgets the attacks can fill (one client address holds answers), a connection window
    per attacking connection (each an HTTP/2 connection's request bodies unread), MARGIN."""
    budgets = (
        BUDGETS["request_buffer_total_bytes"]
        + BUDGETS["fill_buffer_total_bytes"]
        + BUDGETS["compress_queue_bytes"]
        + BUDGETS["answers_held_per_client_bytes"]
    )
    windows = (CONNECTIONS + 2) * MIB
    return quiet_peak + max_bytes + budgets + windows + MARGIN


class H2Origin:
    """The soak's HTTP/2 objects: ``/h2big/*`` (8 MiB, no-store, streamed), ``/h2text*``
    (1 MiB of text, cacheable), ``/h2hot`` (4 KiB, cacheable), and POST (the body read, its
    length answered)."""

    def __init__(self) -> None:
        self.url = ""
        self.counts: Counter[str] = Counter()
        self._runner: web.AppRunner | None = None
        self._text = b"".join(b"line %d of a compressible text\n" % n for n in range(TEXT // 24))[
            :TEXT
        ]

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        if request.method == "POST":
            self.counts["post"] += 1
            try:
                body = await request.read()
            except ConnectionError:  # the edge cut a trickled upload off (408)
                return web.Response(status=400)
            return web.Response(text=str(len(body)), headers={"Cache-Control": "no-store"})
        if path.startswith("/h2big/"):
            self.counts["big"] += 1
            response = web.StreamResponse(headers={"Cache-Control": "no-store"})
            response.content_length = BIG
            await response.prepare(request)
            piece = b"b" * (64 * KIB)
            with contextlib.suppress(ConnectionError):  # the edge let it go (a 503, a cut)
                for _ in range(BIG // len(piece)):
                    await response.write(piece)
                await response.write_eof()
            return response
        if path.startswith("/h2text"):
            self.counts["text"] += 1
            headers = {"Cache-Control": "public, max-age=600", "Content-Type": "text/plain"}
            return web.Response(body=self._text, headers=headers)
        self.counts["hot"] += 1
        headers = {"Cache-Control": "public, max-age=600", "Content-Type": "text/plain"}
        return web.Response(body=b"h" * HOT, headers=headers)


class H2Client:
    """One h2c connection from ``local`` (an address of 127/8), on the h2 library."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.h2 = H2Connection(H2Configuration(client_side=True, header_encoding="utf-8"))
        self.closed = False
        self.reads = False  # whether it gives back the window of what it receives
        self.goaway = False
        self.asked = 0

    @classmethod
    async def open(cls, url: str, local: str, settings: dict[int, int] | None = None) -> H2Client:
        host, _, port = url.split("://", 1)[1].rpartition(":")
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, int(port), local_addr=(local, 0)), 10
        )
        client = cls(reader, writer)
        client.h2.initiate_connection()
        if settings:
            client.h2.update_settings(settings)
        client.flush()
        return client

    def flush(self) -> None:
        data = self.h2.data_to_send()
        if data and not self.writer.is_closing():
            self.writer.write(data)

    def request(
        self, path: str, *, method: str = "GET", extra: list[tuple[str, str]] | None = None
    ) -> int:
        stream = self.h2.get_next_available_stream_id()
        fields = [
            (":method", method),
            (":path", path),
            (":scheme", "http"),
            (":authority", H2_DOMAIN),
            *(extra or []),
        ]
        self.h2.send_headers(stream, fields, end_stream=method == "GET")
        self.flush()
        self.asked += 1
        return stream

    async def events(self, wait: float) -> list[Any]:
        """The events of the next bytes read ([] once closed); ``wait`` at most."""
        try:
            data = await asyncio.wait_for(self.reader.read(65536), wait)
        except (ConnectionError, OSError):
            data = b""
        if not data:
            self.closed = True
            return []
        try:
            events = self.h2.receive_data(data)
            if any(isinstance(event, ConnectionTerminated) for event in events):
                self.closed = self.goaway = True  # after http2_max_requests: a new one next
            if self.reads:
                for event in events:
                    if isinstance(event, DataReceived) and event.stream_id:
                        size = event.flow_controlled_length
                        self.h2.acknowledge_received_data(size, event.stream_id)
        except ProtocolError:
            self.closed = True
            return []
        self.flush()
        return list(events)

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await self.writer.wait_closed()


@dataclass
class H2Tally:
    statuses: Counter[str] = field(default_factory=Counter)  # attack:status -> count
    resets: Counter[str] = field(default_factory=Counter)  # attack -> streams reset
    connections: Counter[str] = field(default_factory=Counter)  # attack -> opened
    errors: Counter[str] = field(default_factory=Counter)
    quiet: list[float] = field(default_factory=list)  # the second client's hit times, s
    attacked: list[float] = field(default_factory=list)
    second_failures: int = 0
    peaks: dict[str, float] = field(default_factory=dict)  # the /metrics figures, highest
    rss: list[tuple[float, int]] = field(default_factory=list)
    cpu: list[tuple[float, float]] = field(default_factory=list)  # at, CPU seconds so far
    quiet_samples: int = 0  # those of the unloaded phase


class H2Abuse:
    """The attacks, started together (``start``) and stopped together (``stop``)."""

    def __init__(self, edge_url: str, api_url: str, tally: H2Tally) -> None:
        self.edge, self.api, self.tally = edge_url, api_url, tally
        self._tasks: list[asyncio.Task[None]] = []
        self._stop = asyncio.Event()
        self._n = 0

    def start(self, attacks: Sequence[str] = ATTACKS, *, scrape: bool = True) -> None:
        """Start ``attacks``, and (``scrape``) the sampling of /metrics's budgets, which
        ``soak`` runs itself for the whole run instead, so that both phases pay for it."""
        loops = [scrape_metrics(self.api, self.tally, self._stop)] if scrape else []
        if "zero-window" in attacks:
            loops += [self._zero_window() for _ in range(CONNECTIONS)]
        if "trickle" in attacks:
            loops.append(self._trickle())
        if "headers" in attacks:
            loops.append(self._headers())
        if "compress" in attacks:
            loops.append(self._compress_misses())
        self._tasks = [asyncio.create_task(loop) for loop in loops]

    async def stop(self) -> None:
        self._stop.set()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _next(self) -> int:
        self._n += 1
        return self._n

    async def _pause(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), seconds)

    async def _zero_window(self) -> None:
        while not self._stop.is_set():
            try:
                client = await H2Client.open(
                    self.edge, ZERO_WINDOW, {SettingCodes.INITIAL_WINDOW_SIZE: 0}
                )
            except (OSError, TimeoutError) as exc:
                self.tally.errors[f"zero-window: {type(exc).__name__}"] += 1
                await self._pause(1)
                continue
            self.tally.connections["zero-window"] += 1
            for _ in range(STREAMS):
                client.request(f"/h2big/{self._next()}")
            await self._watch(client, "zero-window")

    async def _watch(self, client: H2Client, attack: str) -> None:
        """Count the answers' statuses and resets until the edge closes the connection."""
        try:
            while not client.closed and not self._stop.is_set():
                for event in await client.events(60):
                    if isinstance(event, ResponseReceived):
                        fields = cast(list[tuple[str, str]], event.headers)  # utf-8 decoded
                        status = dict(fields).get(":status", "?")
                        self.tally.statuses[f"{attack}:{status}"] += 1
                    elif isinstance(event, StreamReset):
                        self.tally.resets[attack] += 1
                    elif isinstance(event, ConnectionTerminated):
                        self.tally.statuses[f"{attack}:goaway"] += 1
        except TimeoutError:
            pass
        finally:
            await client.close()

    async def _trickle(self) -> None:
        while not self._stop.is_set():
            try:
                client = await H2Client.open(self.edge, TRICKLER)
            except (OSError, TimeoutError) as exc:
                self.tally.errors[f"trickle: {type(exc).__name__}"] += 1
                await self._pause(1)
                continue
            self.tally.connections["trickle"] += 1
            length = [("content-length", str(MIB + 10))]
            streams = [
                client.request(f"/upload/{self._next()}", method="POST", extra=length)
                for _ in range(STREAMS)
            ]
            watcher = asyncio.create_task(self._watch(client, "trickle"))
            try:
                with contextlib.suppress(Exception):
                    for stream in streams:
                        client.h2.send_data(stream, b"t" * (8 * KIB))
                    client.flush()
                while not client.closed and not self._stop.is_set():
                    await self._pause(2)
                    with contextlib.suppress(Exception):
                        for stream in streams:
                            if client.h2.local_flow_control_window(stream) > 0:
                                client.h2.send_data(stream, b"t")
                        client.flush()
            finally:
                watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watcher
                await client.close()

    async def _headers(self) -> None:
        block = huffman_block(MIB)
        while not self._stop.is_set():
            try:
                client = await H2Client.open(self.edge, HEADERS)
                self.tally.connections["headers"] += 1
                fields = [(":method", "GET"), (":path", "/"), (":scheme", "http")]
                head = Encoder().encode([*fields, (":authority", H2_DOMAIN)])
                payload = head + block
                pieces = [payload[i : i + 16 * KIB] for i in range(0, len(payload), 16 * KIB)]
                for index, piece in enumerate(pieces):
                    kind = 0x1 if index == 0 else 0x9
                    flags = 0x4 if index == len(pieces) - 1 else 0
                    frame = len(piece).to_bytes(3, "big") + bytes([kind, flags]) + b"\0\0\0\1"
                    if client.writer.is_closing():
                        break
                    client.writer.write(frame + piece)
                    await client.writer.drain()
                await self._watch(client, "headers")
            except (OSError, TimeoutError) as exc:
                self.tally.errors[f"headers: {type(exc).__name__}"] += 1
            await self._pause(0.5)

    async def _compress_misses(self) -> None:
        connector = aiohttp.TCPConnector(local_addr=(COMPRESSOR, 0))
        timeout = aiohttp.ClientTimeout(total=30)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            while not self._stop.is_set():
                url = f"{self.edge}/h2text?bust={self._next()}"
                headers = {"Host": H2_DOMAIN, "Accept-Encoding": "br, gzip"}
                try:
                    async with session.get(url, headers=headers) as answer:
                        await answer.read()
                        self.tally.statuses[f"compress:{answer.status}"] += 1
                except (aiohttp.ClientError, TimeoutError) as exc:
                    self.tally.errors[f"compress: {type(exc).__name__}"] += 1
                await self._pause(0.25)


async def scrape_metrics(api: str, tally: H2Tally, stop: asyncio.Event) -> None:
    """Read /metrics once a second until ``stop``, keeping each budget gauge's peak. A scrape
    takes the edge's loop a few milliseconds (an operator's Prometheus does the same), so
    ``soak`` runs it through both phases: the unloaded p99 pays for it as the attacked one does."""
    async with aiohttp.ClientSession() as session:
        while not stop.is_set():
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with session.get(api + "/metrics") as answer:
                    text = await answer.text()
                for name, labels, value in _METRIC.findall(text):
                    if name in GAUGES and 'listener="api"' not in labels:
                        tally.peaks[name] = max(tally.peaks.get(name, 0.0), float(value))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 1)


def huffman_block(size: int) -> bytes:
    """A literal field (no indexing) ``x-big`` whose value is ``size`` a's, Huffman coded
    (RFC 7541 §5.2: "a" is the 5-bit code 00011, so 8 of them are these 5 bytes), built by
    hand: hpack's encoder takes seconds for a MiB."""
    value = bytes([0x18, 0xC6, 0x31, 0x8C, 0x63]) * (size // 8)
    return b"\x00" + _integer(5, 7) + b"x-big" + _integer(len(value), 7, 0x80) + value


def _integer(value: int, prefix: int, flags: int = 0) -> bytes:
    """An HPACK integer of a ``prefix``-bit prefix (RFC 7541 §5.1)."""
    top = (1 << prefix) - 1
    if value < top:
        return bytes([flags | value])
    out = [flags | top]
    value -= top
    while value >= 128:
        out.append(value % 128 + 128)
        value //= 128
    out.append(value)
    return bytes(out)


async def second_client(edge: str, into: list[float], stop: asyncio.Event) -> int:
    """Hits of a cached 4 KiB object every 20 ms on one HTTP/2 connection from SECOND, each
    timed into ``into``; returns the failures (a connection or a hit lost). A connection
    the edge ends with GOAWAY NO_ERROR (after edge.http2_max_requests) is opened again, and
    a hit it refused asked again: neither is a failure."""
    failures = 0
    loop = asyncio.get_running_loop()
    client: H2Client | None = None
    while not stop.is_set():
        try:
            if client is None or client.closed:
                if client is not None:
                    await client.close()
                client = await H2Client.open(edge, SECOND)
                client.reads = True
            began = loop.time()
            stream = client.request("/h2hot")
            done = False
            while not done:
                events = await client.events(10)
                if not events and client.closed:
                    raise ConnectionError("closed")
                for event in events:
                    if isinstance(event, StreamEnded | StreamReset) and event.stream_id == stream:
                        done = True
                        if isinstance(event, StreamReset):
                            raise ConnectionError("reset")
            into.append(loop.time() - began)
        except (OSError, TimeoutError, ConnectionError):
            # h2 refuses what follows a GOAWAY in the read that brought it: the connection's
            # last requests (edge.http2_max_requests, 1,000) are not the edge's failures.
            if client is None or not (client.goaway or client.asked >= MAX_REQUESTS):
                failures += 1
            if client is not None:
                await client.close()
            client = None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.02)
    if client is not None:
        await client.close()
    return failures


def p99(times: list[float]) -> float:
    if len(times) < 2:
        return float("nan")
    return statistics.quantiles(times, n=100)[98]


class MixedH2:
    """The attacks mixed into the first rounds' soak (``benchmarks.soak --h2``): ``prepare``
    before the server starts (its origin, and ``configure``), ``start`` with the soak's
    traffic, ``stop`` and ``figures`` at its end, ``close`` in any case. The second client's
    hits are timed under everything the soak does; the RSS bound is the soak's own."""

    def __init__(self) -> None:
        self.origin = H2Origin()
        self.tally = H2Tally()
        self._abuse: H2Abuse | None = None
        self._second: asyncio.Task[int] | None = None
        self._stop = asyncio.Event()

    async def prepare(self, server: SoakServer) -> None:
        await self.origin.start()
        configure(server.config, self.origin.url)

    def start(self, server: SoakServer) -> None:
        self._abuse = H2Abuse(server.edge_url, server.api_url, self.tally)
        self._abuse.start()
        self._second = asyncio.create_task(
            second_client(server.edge_url, self.tally.attacked, self._stop)
        )

    async def stop(self) -> None:
        self._stop.set()
        if self._second is not None:
            self.tally.second_failures += await self._second
        if self._abuse is not None:
            await self._abuse.stop()

    async def close(self) -> None:
        await self.origin.close()

    def figures(self) -> dict[str, Any]:
        tally = self.tally
        return {
            "budgets": BUDGETS,
            "second_p99_ms": p99(tally.attacked) * 1000,
            "second_hits": len(tally.attacked),
            "second_failures": tally.second_failures,
            "statuses": dict(sorted(tally.statuses.items())),
            "resets": dict(tally.resets),
            "connections": dict(tally.connections),
            "errors": dict(tally.errors),
            "metrics_peaks": tally.peaks,
            "origin_requests": dict(self.origin.counts),
        }


def cpu_seconds(pid: int | None) -> float:
    """The server process's user and system CPU seconds so far (/proc/PID/stat)."""
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _sample(server: SoakServer, tally: H2Tally, began: float, stop: asyncio.Event) -> None:
    while not stop.is_set():
        sample = await asyncio.to_thread(server.sample, time.monotonic() - began)
        if sample is not None:
            tally.rss.append((sample.at, sample.rss))
            tally.cpu.append((sample.at, cpu_seconds(server.pid)))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 1.0)


async def soak(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    origin = H2Origin()
    await origin.start()
    server = SoakServer(
        out / "server",
        origin_url=origin.url,
        domains=(),
        max_bytes=args.max_bytes,
        workers=1,
        cpu=args.server_cpu,
    )
    configure(server.config, origin.url)
    tally = H2Tally()
    try:
        await server.start()
        began = time.monotonic()
        stop_all = asyncio.Event()
        sampler = asyncio.create_task(_sample(server, tally, began, stop_all))
        scraper = asyncio.create_task(scrape_metrics(server.api_url, tally, stop_all))
        quiet_stop = asyncio.Event()
        quiet = asyncio.create_task(second_client(server.edge_url, tally.quiet, quiet_stop))
        await asyncio.sleep(args.quiet)  # the unloaded phase: a period, not a synchronisation
        quiet_stop.set()
        tally.second_failures += await quiet
        quiet_peak = max((rss for _, rss in tally.rss), default=0)
        tally.quiet_samples = len(tally.cpu)
        abuse = H2Abuse(server.edge_url, server.api_url, tally)
        abuse.start(args.attacks.split(","), scrape=False)
        attacked_stop = asyncio.Event()
        attacked = asyncio.create_task(
            second_client(server.edge_url, tally.attacked, attacked_stop)
        )
        await asyncio.sleep(max(1.0, args.minutes * 60 - args.quiet))
        attacked_stop.set()
        tally.second_failures += await attacked
        await abuse.stop()
        stop_all.set()
        await sampler
        await scraper
        await server.stop()
    finally:
        await server.kill()
        await origin.close()
    return report(args, tally, quiet_peak, origin)


def report(
    args: argparse.Namespace, tally: H2Tally, quiet_peak: int, origin: H2Origin
) -> dict[str, Any]:
    peak = max((rss for _, rss in tally.rss), default=0)
    bound = rss_bound(quiet_peak, args.max_bytes)
    quiet_p99, attacked_p99 = p99(tally.quiet), p99(tally.attacked)
    quiet_cpu = _core_share(tally.cpu[: tally.quiet_samples])
    attacked_cpu = _core_share(tally.cpu[tally.quiet_samples :])
    return {
        "command": shlex.join(["python", "-m", "benchmarks.soak_h2", *sys.argv[1:]]),
        "minutes": args.minutes,
        "attacks": args.attacks,
        "quiet_seconds": args.quiet,
        "budgets": BUDGETS,
        "edge": EDGE,
        "max_bytes": args.max_bytes,
        "rss_quiet_peak": quiet_peak,
        "rss_peak": peak,
        "rss_bound": bound,
        "rss_margin": MARGIN,
        "rss_ok": peak <= bound,
        "second_quiet_p99_ms": quiet_p99 * 1000,
        "second_attacked_p99_ms": attacked_p99 * 1000,
        "second_quiet_hits": len(tally.quiet),
        "second_attacked_hits": len(tally.attacked),
        "second_failures": tally.second_failures,
        "p99_ok": attacked_p99 <= 2 * quiet_p99,
        "server_cpu_quiet": quiet_cpu,
        "server_cpu_attacked": attacked_cpu,
        "statuses": dict(sorted(tally.statuses.items())),
        "resets": dict(tally.resets),
        "connections": dict(tally.connections),
        "errors": dict(tally.errors),
        "metrics_peaks": tally.peaks,
        "origin_requests": dict(origin.counts),
        "rss": tally.rss,
    }


def _core_share(samples: list[tuple[float, float]]) -> float:
    """The share of a core the server used over ``samples`` (at, CPU seconds so far)."""
    if len(samples) < 2 or samples[-1][0] <= samples[0][0]:
        return float("nan")
    return (samples[-1][1] - samples[0][1]) / (samples[-1][0] - samples[0][0])


def markdown(doc: dict[str, Any]) -> str:
    mib = MIB
    rows = [
        ("command", f"`{doc['command']}`"),
        ("RSS unloaded (peak)", f"{doc['rss_quiet_peak'] / mib:.1f} MiB"),
        ("RSS under attack (peak)", f"{doc['rss_peak'] / mib:.1f} MiB"),
        (
            "RSS bound",
            f"{doc['rss_bound'] / mib:.1f} MiB (unloaded + cache + budgets + windows"
            f" + {doc['rss_margin'] // mib} MiB margin): {'ok' if doc['rss_ok'] else 'OVER'}",
        ),
        (
            "second client's hit p99",
            f"{doc['second_quiet_p99_ms']:.2f} ms unloaded ({doc['second_quiet_hits']} hits),"
            f" {doc['second_attacked_p99_ms']:.2f} ms under attack"
            f" ({doc['second_attacked_hits']} hits): {'ok' if doc['p99_ok'] else 'OVER 2x'}",
        ),
        ("second client's failures", str(doc["second_failures"])),
        (
            "server CPU (a core's share)",
            f"{doc['server_cpu_quiet']:.2f} unloaded,"
            f" {doc['server_cpu_attacked']:.2f} under attack",
        ),
        ("attack answers", ", ".join(f"{k} {v}" for k, v in doc["statuses"].items())),
        ("streams reset by the edge", ", ".join(f"{k} {v}" for k, v in doc["resets"].items())),
        ("attack connections", ", ".join(f"{k} {v}" for k, v in doc["connections"].items())),
        ("attack errors", ", ".join(f"{k} {v}" for k, v in doc["errors"].items()) or "none"),
        (
            "/metrics peaks",
            ", ".join(f"{k} {v:,.0f}" for k, v in sorted(doc["metrics_peaks"].items())),
        ),
        ("origin requests", ", ".join(f"{k} {v}" for k, v in doc["origin_requests"].items())),
    ]
    lines = ["| figure | value |", "|---|---|", *(f"| {a} | {b} |" for a, b in rows)]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.soak_h2",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--minutes", type=float, default=2.0)
    parser.add_argument("--quiet", type=float, default=20.0, help="unloaded seconds first")
    parser.add_argument("--max-bytes", type=int, default=32 * MIB, help="cache.max_bytes")
    parser.add_argument("--out", type=Path, help="report directory (default: a new one)")
    parser.add_argument("--server-cpu", default="1", help="cores for the server (taskset -c)")
    parser.add_argument("--load-cpu", default="0", help="core for this process (the clients)")
    parser.add_argument(
        "--attacks", default=",".join(ATTACKS), help="which, comma-separated (default: all)"
    )
    args = parser.parse_args(argv)
    allowed = os.sched_getaffinity(0)
    if int(args.load_cpu) in allowed:
        os.sched_setaffinity(0, {int(args.load_cpu)})
    out = args.out or Path(tempfile.mkdtemp(prefix="cdn-proxy-soak-h2-"))
    out.mkdir(parents=True, exist_ok=True)
    doc = asyncio.run(soak(args, out))
    (out / "soak_h2.json").write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    text = markdown(doc)
    (out / "soak_h2.md").write_text(text, encoding="utf-8")
    print(text)
    print(f"report: {out}")
    return 0 if doc["rss_ok"] and doc["p99_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
