"""The soak's traffic (benchmarks/soak.py), all at once, counted in a ``Tally``.

- readers: hits on a hot set (``b.soak``), reads of the domain cleared every 100 ms
  (``a.soak``, version-checked), misses over a key space larger than ``cache.max_bytes``
  (``b.soak``, so eviction runs); one reader opens a fresh connection per request;
- fault readers: slow answers, the origin's own 5xx, resets mid-body (``c.soak``);
- the clearer: bumps ``a.soak``'s version at the origin, then clears it, every 100 ms;
- the regenerator: ``cdn-proxy token regenerate soak`` every few seconds; the clearer
  uses the new token from then on;
- the probe, every second, on fresh connections: ``GET /healthz`` and a clear of
  ``probe.soak`` (with a token of its own);
- slowloris connections, edge and API, each slot keeping one open: partial headers dripped
  a line at a time, or a ``Content-Length`` with a few bytes of body and then nothing.

The stale check: each read notes the newest version of its domain whose clear had been
answered 200 when it started; a 200 with an older version is stale. The clears' answers
and the reads' starts are events on this one event loop, so "started after the 200" is
exact as seen by this client.

A failure while the server is down (between a kill -9 and its restart) is counted apart,
by the server's generation: one that changed during the request, or a server that was
down when it started, puts the failure in ``during_restart``.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import random
import time
from collections import Counter
from dataclasses import dataclass

import aiohttp

from benchmarks.soak_origin import FAULT_HEADER, SoakOrigin
from benchmarks.soak_report import Confirmed, Tally
from benchmarks.soak_server import SoakServer

CLEARED, HOT, FAULTY, PROBED = "a.soak", "b.soak", "c.soak", "probe.soak"
FLOODED = "flood.soak"  # the purge flood's domain (benchmarks/soak_abuse.py)
DOMAINS = (CLEARED, HOT, FAULTY, PROBED, FLOODED)
# This traffic's own client address: the abuse (benchmarks/soak_abuse.py) takes 127.0.0.1,
# whose connections the per-client limit refuses once it holds its share.
ADDRESS = "127.0.0.3"
READS = {"hot": 45, "cleared": 30, "cold": 25}  # weights of the readers' mix
FAULTS = ("slow", "err", "reset")
CLEARED_KEYS, HOT_KEYS = 64, 32
READ_TIMEOUT = 15.0  # longer than the origin's slowest answer and the edge's read_timeout
PROBE_TIMEOUT = 2.0
CLEAR_PATH = "/api/v1/cdn/clear-cache"


@dataclass
class Live:
    """Is the server up, and which start of it is this (bumped at each kill)."""

    up: bool = False
    generation: int = 0


@dataclass(frozen=True)
class Settings:
    readers: int = 6
    fault_readers: int = 2
    cold_keys: int = 32768
    clear_every: float = 0.1
    regenerate_every: float = 10.0
    slowloris: int = 8  # connections kept open per target (edge, API) and kind
    slowloris_hold: float = 60.0  # the soak closes one the server has not closed by then
    drip_every: float = 2.0
    seed: int = 0


class Traffic:
    def __init__(
        self,
        server: SoakServer,
        origin: SoakOrigin,
        tally: Tally,
        live: Live,
        tokens: dict[str, str],
        settings: Settings,
    ) -> None:
        self.server, self.origin, self.tally, self.live = server, origin, tally, live
        self.tokens = tokens  # actor -> current token: "soak", "probe", "loris"
        self.settings = settings
        self.rng = random.Random(settings.seed)
        self.confirmed: Counter[str] = Counter()  # domain -> newest version answered 200
        self.cleared = asyncio.Event()  # set at each clear answered 200 (for the kills)
        self.regen_started = self.regen_done = 0
        self.stopping = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._started = time.monotonic()

    def start(self) -> None:
        s = self.settings
        coros = [self._reader(fresh=i == 0) for i in range(s.readers)]
        coros += [self._fault_reader() for _ in range(s.fault_readers)]
        coros += [self._clearer(), self._regenerator(), self._probe()]
        coros += [
            self._loris(target, kind)
            for target in ("edge", "api")
            for kind in ("headers", "body")
            for _ in range(s.slowloris)
        ]
        self._tasks = [asyncio.create_task(c) for c in coros]

    async def stop(self) -> None:
        self.stopping.set()
        await asyncio.gather(*self._tasks)

    # -- bookkeeping ---------------------------------------------------------------------------

    def _restarting(self, generation: int, was_up: bool) -> bool:
        return not (was_up and self.live.up and self.live.generation == generation)

    def _failed(self, what: str, error: BaseException, generation: int, was_up: bool) -> None:
        """A request that got no answer: while restarting, refused, or something else."""
        name = _error_name(error)
        if self._restarting(generation, was_up):
            self.tally.during_restart[f"{what} {name}"] += 1
        elif name in ("refused", "connect failed"):
            api = what.startswith(("clear", "probe", "slowloris api"))
            self.tally.refused[f"{'api' if api else 'edge'} {name}"] += 1
        else:
            self.tally.errors[f"{what} {name}"] += 1
            if not (what == "read reset" and name in ("cut", "disconnected")):
                self.tally.example("requests without an answer", f"{what}: {error!r}")

    async def _pause(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stopping.wait(), seconds)

    # -- reads ---------------------------------------------------------------------------------

    def _session(
        self, *, fresh: bool = False, timeout: float = READ_TIMEOUT
    ) -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(force_close=fresh, limit=8, local_addr=(ADDRESS, 0))
        return aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(total=timeout),
            auto_decompress=False,
        )

    async def _reader(self, *, fresh: bool) -> None:
        kinds, weights = list(READS), list(READS.values())
        async with self._session(fresh=fresh) as session:
            while not self.stopping.is_set():
                kind = self.rng.choices(kinds, weights)[0]
                if not await self._read(session, kind):
                    await self._pause(0.05)  # pacing while the server is down

    async def _fault_reader(self) -> None:
        async with self._session() as session:
            while not self.stopping.is_set():
                if not await self._read(session, self.rng.choice(FAULTS)):
                    await self._pause(0.05)

    def _target(self, kind: str) -> tuple[str, str]:
        if kind == "hot":
            return HOT, f"/v/hot{self.rng.randrange(HOT_KEYS)}"
        if kind == "cleared":
            return CLEARED, f"/v/k{self.rng.randrange(CLEARED_KEYS)}"
        if kind == "cold":
            return HOT, f"/v/cold{self.rng.randrange(self.settings.cold_keys)}"
        return FAULTY, f"/{kind}/{self.rng.randrange(1 << 30)}"

    async def _read(self, session: aiohttp.ClientSession, kind: str) -> bool:
        """One GET; whether it got an answer."""
        domain, path = self._target(kind)
        generation, was_up = self.live.generation, self.live.up
        floor = self.confirmed[domain]  # the newest version a 200 has promised
        what = f"read {kind}"
        self.tally.requests[what] += 1
        try:
            async with session.get(self.server.edge_url + path, headers={"Host": domain}) as r:
                body = await r.read()
                status, fault = r.status, r.headers.get(FAULT_HEADER)
                hit = "hit" in r.headers.get("Cache-Status", "")
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            self._failed(what, exc, generation, was_up)
            return False
        self.tally.statuses[f"{what} {status // 100}xx"] += 1
        self.tally.hits[what] += hit
        if status >= 500:
            self._five_hundred(kind, status, fault, path, body)
        elif status == 200:
            self._check(domain, path, body, floor)
        else:
            self.tally.example(f"read {status}", f"{domain}{path}: {body[:200]!r}")
        return True

    def _five_hundred(
        self, kind: str, status: int, fault: str | None, path: str, body: bytes
    ) -> None:
        if kind == "err" and fault == "5xx":
            self.tally.fivexx["origin"] += 1  # the origin's own, passed through
        elif kind in ("reset", "slow") and status in (502, 504):
            self.tally.fivexx["fault"] += 1  # the edge's answer to an origin that failed
        else:
            self.tally.fivexx["unexpected"] += 1
            self.tally.example("unexpected 5xx", f"{status} {path}: {body[:200]!r}")

    def _check(self, domain: str, path: str, body: bytes, floor: int) -> None:
        head = body[:24].partition(b" ")[0]
        if not head.startswith(b"v") or not head[1:].isdigit():
            self.tally.example("bodies without a version", f"{domain}{path}: {body[:60]!r}")
            return
        if floor:
            self.tally.checked += 1
            if int(head[1:]) < floor:
                self.tally.stale += 1
                self.tally.example("stale after 200", f"{domain}{path}: {head!r} < v{floor}")

    # -- clears, tokens, the probe ---------------------------------------------------------------

    async def _clearer(self) -> None:
        loop = asyncio.get_running_loop()
        async with self._session(timeout=READ_TIMEOUT) as session:
            next_at = loop.time()
            while not self.stopping.is_set():
                await self.clear(session, "soak", CLEARED)
                next_at += self.settings.clear_every
                if next_at < loop.time():  # late (the server was down): no catching up
                    next_at = loop.time()
                await self._pause(next_at - loop.time())

    async def clear(self, session: aiohttp.ClientSession, actor: str, domain: str) -> int | None:
        """Bump the domain's version, then clear it through the API; the answer's status."""
        version = self.origin.bump(domain)
        generation, was_up = self.live.generation, self.live.up
        token, regen = self.tokens[actor], (self.regen_started, self.regen_done)
        what = f"clear {actor}"
        self.tally.requests[what] += 1
        start, started = time.time(), time.perf_counter()
        try:
            async with session.post(
                self.server.api_url + CLEAR_PATH,
                json={"domain": domain},
                headers={"Authorization": f"Bearer {token}"},
            ) as response:
                status = response.status
                await response.read()
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            self._failed(what, exc, generation, was_up)
            self.tally.clears[f"{actor} no answer"] += 1
            return None
        end = time.time()
        if status == 200:
            self.confirmed[domain] = max(self.confirmed[domain], version)
            self.tally.confirmed.append(Confirmed(actor, domain, start, end, generation))
            self.tally.clear_ms.append((time.perf_counter() - started) * 1000)
            self.cleared.set()
            outcome = "200"
        elif status == 401 and (
            regen != (self.regen_started, self.regen_done) or regen[0] != regen[1]
        ):
            outcome = "401 while its token was regenerated"  # expected: the old value
        else:
            outcome = str(status)
            self.tally.example("clears not answered 200", f"{actor} {status}")
        self.tally.clears[f"{actor} {outcome}"] += 1
        return status

    async def _regenerator(self) -> None:
        while not self.stopping.is_set():
            await self._pause(self.settings.regenerate_every)
            if self.stopping.is_set() or not self.live.up:
                continue
            self.regen_started += 1
            started = time.perf_counter()
            try:
                self.tokens["soak"] = await self.server.token("regenerate", "soak")
                self.tally.regenerations.append(time.perf_counter() - started)
            except RuntimeError as exc:
                self.tally.example("token regenerations that failed", str(exc))
            finally:
                self.regen_done += 1

    async def _probe(self) -> None:
        """Every second: is the API reachable (``/healthz``), and does a clear work?"""
        loop = asyncio.get_running_loop()
        while not self.stopping.is_set():
            began = loop.time()
            generation, was_up = self.live.generation, self.live.up
            async with self._session(fresh=True, timeout=PROBE_TIMEOUT) as session:
                try:
                    async with session.get(self.server.api_url + "/healthz") as response:
                        await response.read()
                        ok = response.status == 200
                except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                    self._failed("probe healthz", exc, generation, was_up)
                    ok = False
                if not self._restarting(generation, was_up):
                    self.tally.probes[f"healthz {'ok' if ok else 'failed'}"] += 1
                    if ok:
                        self.tally.probe_ms.append((loop.time() - began) * 1000)
                status = await self.clear(session, "probe", PROBED)
                if not self._restarting(generation, was_up):
                    self.tally.probes[f"clear {'ok' if status == 200 else 'failed'}"] += 1
            await self._pause(began + 1.0 - loop.time())

    # -- slowloris -------------------------------------------------------------------------------

    def _loris_request(self, target: str, kind: str) -> tuple[int, bytes]:
        if target == "edge":
            port = self.server.edge_port
            head = (
                f"GET /v/loris HTTP/1.1\r\nHost: {HOT}\r\n"
                if kind == "headers"
                else f"POST /upload HTTP/1.1\r\nHost: {FAULTY}\r\nContent-Length: 100000\r\n\r\n"
            )
        else:
            port = self.server.api_port
            head = f"POST {CLEAR_PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            if kind == "body":  # a valid token: the stall must not count as an auth failure
                head += f"Authorization: Bearer {self.tokens['loris']}\r\n"
                head += "Content-Type: application/json\r\nContent-Length: 64\r\n\r\n"
        return port, head.encode() + (b'{"domain":' if kind == "body" else b"")

    async def _loris(self, target: str, kind: str) -> None:
        """One slot: keep one slow connection open; when it ends, open another."""
        key = f"{target} {kind}"
        while not self.stopping.is_set():
            if not self.live.up:
                await self._pause(0.2)
                continue
            generation = self.live.generation
            port, first = self._loris_request(target, kind)
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection("127.0.0.1", port, local_addr=(ADDRESS, 0)),
                    PROBE_TIMEOUT,
                )
            except (OSError, TimeoutError) as exc:
                self._failed(f"slowloris {target}", exc, generation, True)
                await self._pause(0.2)
                continue
            self.tally.loris[f"{key} opened"] += 1
            began = time.monotonic()
            try:
                outcome = await self._drip(reader, writer, kind, first)
            finally:
                writer.close()
            if self.live.generation != generation:
                outcome = "ended by a kill"
            elif outcome.startswith(("answered", "closed")):
                took = time.monotonic() - began
                self.tally.loris_closed_after.setdefault(key, []).append(took)
                # A slot is one slow client, not a flood: one the server ends at once (an
                # answer before the body, say) waits a drip before it connects again.
                await self._pause(max(0.0, self.settings.drip_every - took))
            self.tally.loris[f"{key} {outcome}"] += 1

    async def _drip(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, kind: str, first: bytes
    ) -> str:
        """Send ``first``, then (for headers) a header line every ``drip_every`` seconds,
        until the server answers or closes, the soak stops, or ``slowloris_hold`` passes."""
        writer.write(first)
        deadline = time.monotonic() + self.settings.slowloris_hold
        while not self.stopping.is_set():
            wait = min(self.settings.drip_every, deadline - time.monotonic())
            if wait <= 0:
                return "held to the limit"
            try:
                data = await asyncio.wait_for(reader.read(256), wait)
            except TimeoutError:
                if kind == "headers" and not writer.is_closing():
                    writer.write(b"X-Drip: 1\r\n")
                continue
            except OSError:
                return "closed by the server"
            if not data:
                return "closed by the server"
            status = data.split(b" ", 2)[1].decode(errors="replace") if b" " in data else "?"
            return f"answered {status}"
        return "open at the end"


def _error_name(error: BaseException) -> str:
    if isinstance(error, OSError) and error.errno == errno.ECONNREFUSED:
        return "refused"
    if isinstance(error, aiohttp.ClientConnectorError):
        return "connect failed"
    if isinstance(error, TimeoutError):
        return "timeout"
    if isinstance(error, aiohttp.ClientPayloadError):
        return "cut"
    if isinstance(error, aiohttp.ServerDisconnectedError | ConnectionResetError):
        return "disconnected"
    return type(error).__name__
