"""The second round's attacks (issue 24), mixed into the soak (benchmarks/soak.py).

Each attack comes from a client address of its own (all loopback), so that the per-client
connection limit meets only the address that attacks:

- **range abuse** (127.0.0.4), one keep-alive connection per object, each request
  ``Range: bytes=0-0``: a ``no-store`` 3 MiB object, a cacheable 1 MiB object with a
  cache-busting query, a chunked 10 MiB object over ``cache.max_object_bytes``. The client's
  bytes sent and received are counted, beside the origin's body bytes for each object
  (``SoakOrigin.bytes_sent``);
- **body trickles** (127.0.0.5): ``POST`` with ``Content-Length`` 1 MiB + 10, the MiB sent at
  once, then one byte every ``trickle_every`` seconds, each slot keeping one open; the edge's
  ``request_buffer_bytes`` gauge is read from ``/metrics``;
- **one address holding connections** (127.0.0.1): idle keep-alive connections after a hit,
  and WebSocket tunnels, more of them than ``max_connections_per_client``, each slot
  opening another when its connection ends or is refused;
- **a second client** (127.0.0.2): a hit on a fresh connection every ``second_every``
  seconds while that goes on: its success rate;
- **the purge flood** (127.0.0.6): ``POST /api/v1/cdn/purge`` with a token scoped to one
  domain, 256 distinct 4,000-character paths per request, every ``purge_every`` seconds;
  ``purge_state_bytes`` is read from ``/metrics``.

Every second ``/metrics`` is read for the gauges (their highest values are kept).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from benchmarks.soak_load import FLOODED, HOT, HOT_KEYS, Live
from benchmarks.soak_origin import RANGED, SoakOrigin
from benchmarks.soak_report import Tally
from benchmarks.soak_server import SoakServer

MIB = 1024 * 1024
ATTACKER, SECOND, RANGER, TRICKLER, FLOODER = (
    "127.0.0.1",
    "127.0.0.2",
    "127.0.0.4",
    "127.0.0.5",
    "127.0.0.6",
)
TIMEOUT = 15.0
TRICKLE_EXTRA = 10  # bytes of the body left to trickle after the first MiB (the issue's)
PURGE_PATHS, PURGE_PATH_CHARS = 256, 4000
GAUGES = (
    "request_buffer_bytes",
    "request_buffer_max_bytes",
    "purge_state_bytes",
    "purge_state_max_bytes",
    "connections_per_client_max",
    "tunnels_open",
)
_METRIC = re.compile(r"^cdn_proxy_(\w+?)(?:\{([^}]*)\})? (\S+)$", re.MULTILINE)


@dataclass(frozen=True)
class AbuseSettings:
    range_rate: float = 50.0  # ranged requests a second, per object
    trickles: int = 96  # 96 MiB of bodies against request_buffer_total_bytes (64 MiB)
    trickle_every: float = 10.0
    idle: int = 900  # the attacker's idle connections ...
    tunnels: int = 300  # ... and tunnels: 1,200 in all, over the per-client limit (1,024)
    second_every: float = 0.05
    purge_every: float = 0.5


@dataclass
class AbuseTally:
    ranges: dict[str, Counter[str]] = field(default_factory=dict)  # kind -> figures
    trickles: Counter[str] = field(default_factory=Counter)
    trickle_ended_after: dict[str, list[float]] = field(default_factory=dict)  # by outcome
    attack: Counter[str] = field(default_factory=Counter)
    held: int = 0
    held_max: int = 0
    second: Counter[str] = field(default_factory=Counter)
    purges: Counter[str] = field(default_factory=Counter)
    gauges: dict[str, float] = field(default_factory=dict)  # highest value seen
    refused_per_client: float = 0.0


class Abuse:
    def __init__(
        self,
        server: SoakServer,
        origin: SoakOrigin,
        tally: Tally,
        live: Live,
        flood_token: str,
        settings: AbuseSettings,
    ) -> None:
        self.server, self.origin, self.tally, self.live = server, origin, tally, live
        self.flood_token = flood_token
        self.settings = settings
        self.counts = AbuseTally(ranges={kind: Counter() for kind in RANGED})
        self.stopping = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        s = self.settings
        coros = [self._ranger(kind) for kind in RANGED]
        coros += [self._trickle() for _ in range(s.trickles)]
        coros += [self._hold(tunnel=False) for _ in range(s.idle)]
        coros += [self._hold(tunnel=True) for _ in range(s.tunnels)]
        coros += [self._second_client(), self._purge_flood(), self._metrics()]
        self._tasks = [asyncio.create_task(c) for c in coros]

    async def stop(self) -> None:
        self.stopping.set()
        await asyncio.gather(*self._tasks)

    async def _pause(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stopping.wait(), max(0.0, seconds))

    async def _connect(
        self, address: str
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        if not self.live.up:
            await self._pause(0.2)
            return None
        try:
            return await asyncio.wait_for(
                asyncio.open_connection(
                    "127.0.0.1", self.server.edge_port, local_addr=(address, 0), limit=2**20
                ),
                TIMEOUT,
            )
        except (OSError, TimeoutError):
            await self._pause(0.2)
            return None

    # -- range abuse ----------------------------------------------------------------------------

    async def _ranger(self, kind: str) -> None:
        figures, sent = self.counts.ranges[kind], 0
        loop = asyncio.get_running_loop()
        while not self.stopping.is_set():
            opened = await self._connect(RANGER)
            if opened is None:
                continue
            reader, writer = opened
            next_at = loop.time()
            try:
                while not self.stopping.is_set():
                    sent += 1
                    query = f"?bust={sent}" if kind == "big1m" else ""
                    request = (
                        f"GET /{kind}/obj{query} HTTP/1.1\r\nHost: {HOT}\r\n"
                        "Range: bytes=0-0\r\n\r\n"
                    ).encode()
                    writer.write(request)
                    status, received, keep = await asyncio.wait_for(read_response(reader), TIMEOUT)
                    figures["requests"] += 1
                    figures["client sent"] += len(request)
                    figures["client received"] += received
                    figures[f"status {status}"] += 1
                    if status >= 500:
                        self.tally.fivexx["unexpected"] += 1
                        self.tally.example("unexpected 5xx", f"{status} ranged /{kind}")
                    if not keep:
                        break
                    next_at += 1 / self.settings.range_rate
                    await self._pause(next_at - loop.time())
            except (OSError, EOFError, TimeoutError, ValueError, asyncio.LimitOverrunError) as exc:
                figures[f"error {type(exc).__name__}"] += 1
            finally:
                writer.close()

    # -- body trickles --------------------------------------------------------------------------

    async def _trickle(self) -> None:
        count = self.counts.trickles
        while not self.stopping.is_set():
            opened = await self._connect(TRICKLER)
            if opened is None:
                continue
            reader, writer = opened
            began = time.monotonic()
            outcome = "closed by the server"
            try:
                writer.write(
                    f"POST /upload/t HTTP/1.1\r\nHost: {HOT}\r\n"
                    f"Content-Length: {MIB + TRICKLE_EXTRA}\r\n\r\n".encode()
                    + b"t" * MIB
                )
                count["opened"] += 1
                outcome = await self._drip(reader, writer)
            except (OSError, TimeoutError):
                pass
            finally:
                writer.close()
            count[outcome] += 1
            if outcome != "open at the end":
                took = time.monotonic() - began
                self.counts.trickle_ended_after.setdefault(outcome, []).append(took)
                await self._pause(1.0)

    async def _drip(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> str:
        left = TRICKLE_EXTRA
        while not self.stopping.is_set():
            try:
                data = await asyncio.wait_for(reader.read(1024), self.settings.trickle_every)
            except TimeoutError:
                if left > 1:  # the last byte is never sent: the body never ends
                    writer.write(b"t")
                    left -= 1
                continue
            if not data:
                return "closed by the server"
            status = data.split(b" ", 2)[1].decode(errors="replace")
            if b"\r\n\r\n" in data and data.endswith(b"\r\n\r\n"):  # the body came apart
                with contextlib.suppress(OSError, TimeoutError):
                    data += await asyncio.wait_for(reader.read(1024), 1.0)
            self.tally.example(
                f"body trickles answered {status}", repr(data.partition(b"\r\n\r\n")[2][:200])
            )
            return f"answered {status}"
        return "open at the end"

    # -- one address holding connections, and a second client -----------------------------------

    async def _hold(self, *, tunnel: bool) -> None:
        kind = "tunnel" if tunnel else "idle"
        count = self.counts.attack
        while not self.stopping.is_set():
            generation, was_up = self.live.generation, self.live.up
            opened = await self._connect(ATTACKER)
            if opened is None:
                if was_up and self.live.up and self.live.generation == generation:
                    count[f"{kind} no connection"] += 1  # not counted while it restarts
                continue
            reader, writer = opened
            try:
                if tunnel:
                    writer.write(
                        f"GET /ws/t HTTP/1.1\r\nHost: {HOT}\r\nUpgrade: websocket\r\n"
                        "Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
                        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n".encode()
                    )
                else:
                    writer.write(f"GET /v/hot-0 HTTP/1.1\r\nHost: {HOT}\r\n\r\n".encode())
                status, _, keep = await asyncio.wait_for(read_response(reader), TIMEOUT)
                count[f"{kind} {status}"] += 1
                if status in (101, 200) and keep:
                    await self._held(reader)
                else:
                    await self._pause(1.0)  # refused: try again a second later
            except (OSError, EOFError, TimeoutError, ValueError, asyncio.LimitOverrunError):
                count[f"{kind} cut"] += 1
                await self._pause(1.0)
            finally:
                writer.close()

    async def _held(self, reader: asyncio.StreamReader) -> None:
        """Hold the connection until the server closes it or the soak stops."""
        a = self.counts
        a.held += 1
        a.held_max = max(a.held_max, a.held)
        read = asyncio.ensure_future(reader.read(1))
        stop = asyncio.ensure_future(self.stopping.wait())
        try:
            await asyncio.wait((read, stop), return_when=asyncio.FIRST_COMPLETED)
        finally:
            a.held -= 1
            for future in (read, stop):
                future.cancel()
            with contextlib.suppress(asyncio.CancelledError, OSError):
                await read

    async def _second_client(self) -> None:
        count, n = self.counts.second, 0
        connector = aiohttp.TCPConnector(force_close=True, local_addr=(SECOND, 0))
        timeout = aiohttp.ClientTimeout(total=TIMEOUT)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            while not self.stopping.is_set():
                await self._pause(self.settings.second_every)
                generation, was_up = self.live.generation, self.live.up
                n += 1
                try:
                    async with session.get(
                        f"{self.server.edge_url}/v/hot-{n % HOT_KEYS}", headers={"Host": HOT}
                    ) as response:
                        await response.read()
                        outcome = str(response.status)
                except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                    outcome = type(exc).__name__
                if was_up and self.live.up and self.live.generation == generation:
                    count[outcome] += 1  # a kill -9 round's failures are not the attacker's

    # -- the purge flood, and /metrics ----------------------------------------------------------

    async def _purge_flood(self) -> None:
        count, round_ = self.counts.purges, 0
        loop = asyncio.get_running_loop()
        connector = aiohttp.TCPConnector(limit=1, local_addr=(FLOODER, 0))
        timeout = aiohttp.ClientTimeout(total=TIMEOUT)
        headers = {
            "Authorization": f"Bearer {self.flood_token}",
            "Content-Type": "application/json",
        }
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            next_at = loop.time()
            while not self.stopping.is_set():
                next_at += self.settings.purge_every
                await self._pause(next_at - loop.time())
                if not self.live.up:
                    continue
                round_ += 1
                try:
                    async with session.post(
                        self.server.api_url + "/api/v1/cdn/purge",
                        data=flood_body(round_),
                        headers=headers,
                    ) as response:
                        await response.read()
                        count[str(response.status)] += 1
                except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                    count[type(exc).__name__] += 1
                next_at = max(next_at, loop.time())

    async def _metrics(self) -> None:
        timeout = aiohttp.ClientTimeout(total=TIMEOUT)
        connector = aiohttp.TCPConnector(local_addr=(FLOODER, 0))
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            while not self.stopping.is_set():
                await self._pause(1.0)
                if not self.live.up:
                    continue
                try:
                    async with session.get(self.server.api_url + "/metrics") as response:
                        text = await response.text()
                except (aiohttp.ClientError, TimeoutError, OSError):
                    continue
                self._note(text)

    def _note(self, text: str) -> None:
        a = self.counts
        refused = 0.0
        for name, labels, value in _METRIC.findall(text):
            if name in GAUGES:
                a.gauges[name] = max(a.gauges.get(name, 0.0), float(value))
            elif name == "connections_refused_total" and 'reason="per_client"' in labels:
                refused += float(value)
        a.refused_per_client = max(a.refused_per_client, refused)

    # -- figures --------------------------------------------------------------------------------

    def figures(self) -> dict[str, Any]:
        a, origin = self.counts, self.origin
        ranges = {}
        for kind, figures in a.ranges.items():
            client = figures["client sent"] + figures["client received"]
            requests = figures["requests"]
            ranges[kind] = {
                "requests": requests,
                "client_bytes_sent": figures["client sent"],
                "client_bytes_received": figures["client received"],
                "origin_requests": origin.counts[kind],
                "origin_bytes": origin.bytes_sent[kind],
                "origin_bytes_per_request": origin.bytes_sent[kind] / requests
                if requests
                else None,
                "origin_bytes_per_client_byte": origin.bytes_sent[kind] / client
                if client
                else None,
                "counts": dict(sorted(figures.items())),
            }
        second = a.second
        answered = sum(second.values())
        return {
            "settings": vars(self.settings),
            "range": ranges,
            "trickles": {
                "outcomes": dict(sorted(a.trickles.items())),
                "ended_after_s_median": {
                    outcome: round(sorted(took)[len(took) // 2], 3)
                    for outcome, took in sorted(a.trickle_ended_after.items())
                },
                "origin_posts": origin.counts["post"],
            },
            "attack": {
                "outcomes": dict(sorted(a.attack.items())),
                "held_max": a.held_max,
                "refused_per_client": a.refused_per_client,
            },
            "second_client": {
                "outcomes": dict(sorted(second.items())),
                "requests": answered,
                "ok": second["200"],
                "success_rate": second["200"] / answered if answered else None,
            },
            "purge_flood": {"outcomes": dict(sorted(a.purges.items()))},
            "gauges_max": dict(sorted(a.gauges.items())),
        }


def flood_body(round_: int) -> bytes:
    """256 distinct 4,000-character paths of the flooded domain (issue 24, 2)."""
    urls = []
    for i in range(PURGE_PATHS):
        head = f"/r{round_}/p{i}/"
        urls.append(head + "x" * (PURGE_PATH_CHARS - len(head)))
    return json.dumps({"domain": FLOODED, "urls": urls}).encode()


async def read_response(reader: asyncio.StreamReader) -> tuple[int, int, bool]:
    """One HTTP/1.1 response: its status, the bytes it took on the wire, and whether the
    connection stays open. A 101's head is all there is."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    fields = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        fields[name.strip().lower()] = value.strip().lower()
    received = len(head)
    keep = fields.get("connection") != "close"
    if status in (101, 204, 304):
        return status, received, keep
    if "chunked" in fields.get("transfer-encoding", ""):
        while True:
            size_line = await reader.readuntil(b"\r\n")
            size = int(size_line.split(b";")[0], 16)
            await reader.readexactly(size + 2)
            received += len(size_line) + size + 2
            if size == 0:
                return status, received, keep
    if "content-length" in fields:
        received += len(await reader.readexactly(int(fields["content-length"])))
        return status, received, keep
    received += len(await reader.read())  # to the close
    return status, received, False
