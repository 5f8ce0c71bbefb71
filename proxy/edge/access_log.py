"""The edge's access log and response figures: what every response reports once it is sent.

aiohttp calls an access logger after each response is written (``access_log_class``, its
public ``AbstractAccessLogger``), with the request, the response and the seconds since the
request's head came: parse errors (400), the proxy's own 421 and fast hits included. The hook
(``_Hook.log``) counts the response in ``Responses`` (status class, bytes, time: /metrics) and,
when the log is on, appends a tuple of what it read to a bounded queue. That is all it does on
the request's path: a writer thread (``LogWriter``) wakes when the queue stops being empty,
lets a batch gather for ``BATCH_SECONDS``, formats the lines
(proxy/core/observe/access_format.py) and
writes them with as few ``write`` calls as it can, each holding whole lines, to a file opened
with O_APPEND (so the edge workers of a node can share one file) or to standard output. A
stalled disk blocks only that thread; the queue stops at ``QUEUE_LINES`` and lines past it
are counted (``cdn_proxy_access_log_dropped_total``), never waited for. Decision 0019.

``EdgeAccess.reopen`` (SIGUSR1) reopens the file by its path, for logrotate;
``EdgeAccess.reconfigure`` switches the log on, off, to another path or format.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import threading
import time
from collections import deque
from time import perf_counter
from typing import TYPE_CHECKING, Any

from aiohttp import hdrs, web
from aiohttp.abc import AbstractAccessLogger
from aiohttp.http import HttpVersion11

from proxy.config.model import Config
from proxy.core.domains import host_from_header
from proxy.core.http.forwarded import TrustedProxies
from proxy.core.observe.access_format import Entry, Formatter, cache_label, rules_of
from proxy.core.observe.responses import UNROUTED, DomainResponses, Responses, record
from proxy.edge.aiohttp_adapter import Prewritten
from proxy.edge.origin import ORIGIN_SECONDS, REQUEST_STARTED
from proxy.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Mapping

log = logging.getLogger("proxy.edge.access")

STDOUT = "-"
QUEUE_LINES = 65_536  # lines waiting for the writer; past it they are dropped and counted
BATCH_SECONDS = 0.02  # how long the writer lets lines gather once one is waiting
HOST_SPELLINGS = 256  # Host spellings remembered per domain table, as Edge._route
PIPE_BUF = 4096  # a write to a pipe up to this size is never interleaved with another's
FILE_CHUNK = 1024 * 1024

_HOST = hdrs.HOST
_record = record
_REFERER = hdrs.REFERER
_REQUEST_STARTED = REQUEST_STARTED
_perf_counter = perf_counter
_USER_AGENT = hdrs.USER_AGENT


def check_destination(config: Config) -> None:
    """ConfigError if the access log file cannot be opened (a node checks before its workers
    start, so the message is the one-line config error, not a worker that will not start)."""
    edge, _ = config.edge_role()
    if edge.access_log is not None and edge.access_log != STDOUT:
        os.close(_open(edge.access_log))


def trusted_proxies(config: Config) -> TrustedProxies:
    edge, _ = config.edge_role()
    return TrustedProxies(edge.trusted_proxies, edge.forwarded_header)


class EdgeAccess:
    """One edge process's hook: its response figures, and its access log when it has one."""

    __slots__ = ("_domains", "_stdout", "by_host", "responses", "unrouted", "writer")

    def __init__(self, config: Config, *, responses: Responses, stdout: int = 1) -> None:
        """``stdout``: the descriptor ``"-"`` writes to (a worker gets its node's)."""
        self.responses = responses
        self._stdout = stdout
        self._domains: Mapping[str, str] = {}
        self.by_host: dict[str | None, list[float]] = {}  # Host spelling -> its domain's counts
        self.unrouted = responses.of(UNROUTED)
        self.writer: LogWriter | None = None
        self.reconfigure(config)

    def reconfigure(self, config: Config) -> None:
        """Take the config's [edge] access_log, its format, trusted_proxies and domains.
        Opens a new log file first (ConfigError if it cannot be opened), then swaps; lines
        already queued are written where they were meant to go."""
        edge, _ = config.edge_role()
        trusted = trusted_proxies(config)
        writer = self.writer
        same = writer is not None and writer.settings == (edge.access_log, edge.access_log_format)
        if same and writer is not None:
            writer.trusted, writer.forwarding = trusted, bool(trusted)
        elif edge.access_log is not None:
            writer = LogWriter(
                edge.access_log, edge.access_log_format, trusted, self._stdout, self.responses
            )
        else:
            writer = None
        self._domains = {domain.name: domain.name for domain in config.domains}
        self.by_host = {}
        old, self.writer = self.writer, writer
        if old is not None and old is not writer:
            old.close_soon()

    def figures_for(self, host: str | None) -> DomainResponses:
        """The figures a Host header counts under (remembered per spelling, bounded)."""
        name = host_from_header(host) if host else None
        domain = self._domains.get(name) if name else None
        if domain is None:
            return self.unrouted
        figures = self.responses.of(domain)
        if len(self.by_host) < HOST_SPELLINGS:
            self.by_host[host] = figures.counts
        return figures

    def reopen(self) -> None:
        """SIGUSR1: reopen the log file by its path (logrotate moved the old one away)."""
        if self.writer is not None:
            self.writer.reopen()

    async def close(self) -> None:
        """Write what is queued (bounded by ``CLOSE_SECONDS``) and stop the writer."""
        writer, self.writer = self.writer, None
        if writer is not None:
            await writer.close()

    def logger_class(self) -> type[AbstractAccessLogger]:
        return _Hook


class _Hook(AbstractAccessLogger):
    """aiohttp's access logger for the edge: ``logger`` is the ``EdgeAccess`` (aiohttp makes
    one of these per connection, from ``access_log_class`` and ``access_log``)."""

    __slots__ = ()

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        # On every response, fast hits included: measured in decision 0019. The figures are
        # DomainResponses.record, inlined.
        access: EdgeAccess = self.logger  # type: ignore[assignment]
        if response.__class__ is Prewritten:
            # A fast hit has added itself to the figures (Prewritten.prepare): only its line.
            writer = access.writer
            if writer is not None:
                headers = request.headers
                host = headers.get(_HOST)
                sent = response.body_length
                took = _perf_counter() - response.started
                _queue(
                    access, writer, request, response, headers, host, response.status, sent, took
                )
            return
        started = _REQUEST_STARTED.get()
        if started is not None:  # else aiohttp answered it alone (400): the loop's time
            time = _perf_counter() - started
        headers = request.headers
        host = headers.get(_HOST)
        counts = access.by_host.get(host)
        if counts is None:
            counts = access.figures_for(host).counts
        status = response.status
        sent = response.body_length
        _record(counts, status, sent, time)
        writer = access.writer
        if writer is not None:
            _queue(access, writer, request, response, headers, host, status, sent, time)


class LaneRequest:
    """What the access log reads of a request, for a hit the lane answered (decision 0050):
    it has no aiohttp request. ``headers`` is the lane's ``Fields``."""

    __slots__ = ("headers", "method", "raw_path", "remote")
    version = HttpVersion11  # the lane reads HTTP/1.1 alone

    def __init__(self, remote: str | None, method: str, raw_path: str, headers: Any) -> None:
        self.remote = remote
        self.method = method
        self.raw_path = raw_path
        self.headers = headers


def log_lane_hit(access: EdgeAccess, request: LaneRequest, response: Prewritten) -> None:
    """The line of a hit the lane answered, as ``_Hook.log`` queues a fast hit's (the lane
    has counted it in the figures already, as ``Prewritten.prepare`` does)."""
    writer = access.writer
    if writer is not None:
        headers = request.headers
        took = _perf_counter() - response.started
        sent = response.body_length
        host = headers.get(_HOST)
        _queue(access, writer, request, response, headers, host, response.status, sent, took)  # type: ignore[arg-type]


def _queue(
    access: EdgeAccess,
    writer: LogWriter,
    request: web.BaseRequest,
    response: web.StreamResponse,
    headers: Any,
    host: str | None,
    status: int,
    sent: int,
    total: float,
) -> None:
    """Queue the line of a response for the writer thread: what it needs, read now."""
    if len(writer.queue) >= writer.capacity:
        access.responses.log_dropped += 1
        return
    hit = type(response) is Prewritten
    writer.queue.append(
        (
            _now(),
            request.remote,
            _forwarding(headers) if writer.forwarding else None,
            request.method,
            request.version,
            host,
            request.raw_path,
            headers.get(_REFERER),
            headers.get(_USER_AGENT),
            status,
            sent,
            "HIT" if hit else cache_label(response.headers.get("Cache-Status")),
            None if hit else ORIGIN_SECONDS.get(),
            total,
            # What names the cache rules (decision 0033), read by the writer thread: the
            # fast hit itself (its headers are parsed only if read), else its Cache-Status.
            response if hit else response.headers.get("Cache-Status"),
        )
    )
    if not writer.waking:
        writer.waking = True
        writer.wake.set()


_now = time.time


def _forwarding(headers: Any) -> tuple[list[str], list[str], list[str]]:
    return (
        headers.getall(hdrs.X_FORWARDED_FOR, []),
        headers.getall(hdrs.X_FORWARDED_PROTO, []),
        headers.getall(hdrs.FORWARDED, []),
    )


CLOSE_SECONDS = 2.0


class LogWriter:
    """The thread that formats and writes queued lines to one destination."""

    def __init__(
        self,
        destination: str,
        format: str,
        trusted: TrustedProxies,
        stdout: int,
        responses: Responses,
    ) -> None:
        self.settings = (destination, format)
        self._responses = responses  # its log_failed: this thread's count of lost lines
        self.trusted = trusted
        self.forwarding = bool(trusted)  # read forwarding fields for the line's client
        self._formatter = Formatter(format)
        self._path = None if destination == STDOUT else destination
        self._fd = stdout if self._path is None else _open(self._path)
        self._chunk = _chunk_size(self._fd)
        self.queue: deque[tuple[Any, ...]] = deque()
        self.capacity = QUEUE_LINES
        self.wake = threading.Event()
        self.waking = False  # the thread was woken and has not yet taken the queue
        self._reopen = False
        self._closing = False
        self._thread = threading.Thread(target=self._run, name="access-log", daemon=True)
        self._thread.start()

    def reopen(self) -> None:
        self._reopen = True
        self.wake.set()

    def close_soon(self) -> None:
        """Write what is queued, then stop; returns at once."""
        self._closing = True
        self.wake.set()

    async def close(self) -> None:
        import asyncio

        self.close_soon()
        await asyncio.to_thread(self._thread.join, CLOSE_SECONDS)

    # -- the thread ------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            self.wake.wait()
            self.wake.clear()
            if not self._closing:
                time.sleep(BATCH_SECONDS)  # lets a batch gather: fewer, larger writes
            self.waking = False  # before taking the queue: a line added now wakes us again
            if self._reopen:
                self._reopen = False
                self._reopened()
            self._flush()
            if self._closing:
                break
        if self._path is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)

    def _flush(self) -> None:
        queue = self.queue
        chunk: list[str] = []
        size = 0
        for _ in range(len(queue)):
            line = self._line(queue.popleft())
            if line is None:
                continue
            if chunk and size + len(line) > self._chunk:
                self._write(chunk)
                chunk, size = [], 0
            chunk.append(line)
            size += len(line)
        if chunk:
            self._write(chunk)

    def _line(self, record: tuple[Any, ...]) -> str | None:
        try:
            (when, peer, fwd, method, version, host, target, referer, agent) = record[:9]
            status, sent, cache, origin, total, source = record[9:]
            if source is not None and not isinstance(source, str):
                source = source.headers.get("Cache-Status")
            client = peer or "-"
            if fwd is not None:
                client = self.trusted.client(
                    client, "http", forwarded_for=fwd[0], forwarded_proto=fwd[1], forwarded=fwd[2]
                ).address
            entry = Entry(
                time=when,
                client=client,
                method=method,
                host=host,
                target=target,
                protocol=f"HTTP/{version[0]}.{version[1]}",
                status=status,
                bytes_sent=sent,
                cache=cache,
                origin_seconds=origin,
                total_seconds=total,
                referer=referer,
                user_agent=agent,
                rules=rules_of(source),
            )
            return self._formatter.line(entry)
        except Exception:  # a record we cannot format must not stop the log
            log.exception("access log: a line could not be formatted")
            self._responses.log_failed += 1
            return None

    def _write(self, lines: list[str]) -> None:
        data = "".join(lines).encode("utf-8", "surrogateescape")
        try:
            while data:
                written = os.write(self._fd, data)
                data = data[written:]
        except OSError as exc:
            self._responses.log_failed += len(lines)
            log.warning("access log: %d lines not written (%s)", len(lines), exc)

    def _reopened(self) -> None:
        if self._path is None:
            return
        try:
            fd = _open(self._path)
        except ConfigError as exc:
            log.warning("access log not reopened: %s", exc)
            return
        old, self._fd = self._fd, fd
        os.close(old)
        log.info("access log reopened: %s", self._path)


def _open(path: str) -> int:
    try:
        return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o640)
    except OSError as exc:
        raise ConfigError("edge.access_log", f"cannot open {path} ({exc.strerror})") from None


def _chunk_size(fd: int) -> int:
    """Writes to a regular file with O_APPEND land whole; to a pipe, only up to PIPE_BUF."""
    try:
        regular = stat.S_ISREG(os.fstat(fd).st_mode)
    except OSError:
        regular = False
    return FILE_CHUNK if regular else PIPE_BUF
