"""The compressing itself, for the copies core/http/compression.py decides on (decision 0035).

It runs once per stored object, in one thread per process (``Compressions``), so the event
loop keeps answering while a body is compressed, and compression takes at most one core of
the process whatever the traffic (decision 0046). Each coding is fed in slices of ``SLICE``
bytes: every slice is one short call into C, and the GIL is free between them even where a
binding holds it during a call, so the loop thread never waits on a whole body.

The thread runs below the event loop (``_yield_to_the_loop``): Linux's ``SCHED_IDLE``
policy, so where the process has one core a flood of compression misses takes only what the
loop leaves, and a loop thread that wakes (a hit arrives) takes the core at once. A nice value
(``NICE``, decision 0051) was not enough: Linux's scheduler lets a running niced thread finish
its slice, 3 to 4 ms, before the woken loop runs, and the HTTP/2 soak's hits had their p99
doubled by it (decision 0061). But ``SCHED_IDLE`` alone would starve compression on a node
whose cores never idle, so a body that has waited ``STARVED`` (1 s) since it was queued has
the rest of its work run niced instead (``Starving``): the share decision 0051 gave it. Where
``SCHED_IDLE`` is refused, the nice value alone; elsewhere the priority stays as it is.

The queue is bounded in bytes (edge.compress_queue_bytes): a body that would pass it is not
compressed now (``submit`` returns None); it is stored as sent, and a later miss of a coding
compresses it. A cache-busting query therefore costs at most the queue's worth of CPU at a
time, and the misses past it go out uncompressed.

Levels: fitted to the size (core/http/compression.py ``level_for``): brotli 9 (window 4 MiB),
gzip 6, zstd 12 for small bodies, as decision 0035 measured (each object is compressed once
and served many times, so higher than a per-hit compressor affords: nginx's gzip_comp_level is
1), and lower levels as bodies grow, so the CPU per byte of a large one stays near gzip 4's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
import zlib
from collections.abc import Awaitable, Callable, Hashable
from concurrent.futures import ThreadPoolExecutor

import brotli
import zstandard

from proxy.core.http.compression import level_for

SLICE = 64 * 1024
NICE = 10  # the compression thread's, above the loop's: its share once a body starved
STARVED = 1.0  # seconds a body may wait under SCHED_IDLE before it runs niced (Starving)
BROTLI_WINDOW = 22
log = logging.getLogger("proxy.edge")


class Compressions:
    """One process's compression: a thread of its own, and the bytes of the bodies queued
    or being compressed, against ``max_bytes``; ``refused`` counts those turned away. Copies
    stored after their first client's answer (``later``) are tracked by their key, so a key
    is compressed once at a time, and their tasks are cancelled by ``close``."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.pending = 0
        self.refused = 0
        self._executor: ThreadPoolExecutor | None = None
        self._keys: set[Hashable] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    def busy(self, key: Hashable) -> bool:
        """Whether copies of ``key`` are being made (then it is not compressed again now)."""
        return key in self._keys

    def later(
        self,
        key: Hashable,
        made: asyncio.Future[dict[str, bytes]],
        store: Callable[[str, bytes], Awaitable[object]],
    ) -> None:
        """Once ``made``, ``store`` each copy (its coding, its bytes), in a task of its own."""
        self._keys.add(key)
        task = asyncio.create_task(self._stored(key, made, store))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _stored(
        self,
        key: Hashable,
        made: asyncio.Future[dict[str, bytes]],
        store: Callable[[str, bytes], Awaitable[object]],
    ) -> None:
        try:
            for coding, copy in (await made).items():
                await store(coding, copy)
        except Exception:  # a compressor's or the store's fault: the copies are not kept
            log.exception("compressed copies not stored")
        finally:
            self._keys.discard(key)

    def submit(
        self, body: bytes, codings: tuple[str, ...]
    ) -> asyncio.Future[dict[str, bytes]] | None:
        """The body in each of ``codings``, once the thread has made them; None when the
        queue has no room for it (it is then not compressed now)."""
        size = len(body)
        if self.pending + size > self.max_bytes:
            self.refused += 1
            return None
        if self._executor is None:
            self._executor = ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="compress", initializer=_yield_to_the_loop
            )
        self.pending += size
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(self._executor, encode_all, body, codings, time.monotonic())
        future.add_done_callback(lambda _: self._done(size))
        return future

    def _done(self, size: int) -> None:
        self.pending -= size

    async def close(self) -> None:
        """Drop what is queued (at shutdown); the body being compressed ends in its thread."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None


def _yield_to_the_loop() -> None:
    """Put this thread below the loop: a nice value ``NICE`` above its own (setpriority of a
    thread id is that thread's alone), then ``SCHED_IDLE`` (a policy set with pid 0 is the
    calling thread's alone); where either is refused or unknown, it stays as it is."""
    with contextlib.suppress(OSError, AttributeError):
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + NICE)
    _policy("SCHED_IDLE")


def _policy(name: str) -> None:
    """Set this thread's scheduling policy (``os.SCHED_IDLE`` or ``os.SCHED_OTHER``), where
    the platform has it and allows it."""
    with contextlib.suppress(OSError, AttributeError):
        os.sched_setscheduler(0, getattr(os, name), os.sched_param(0))


class Starving:
    """One body's copies, made in the compression thread. ``SCHED_IDLE`` runs only on what
    the process's cores leave: on a node whose cores never idle, it would never run. So once
    the body has waited ``STARVED`` seconds since it was queued, the rest of its work runs as
    a normal thread at its nice value (decision 0051's share, about a tenth of a busy core),
    and the thread goes back to ``SCHED_IDLE`` after it (``done``)."""

    __slots__ = ("_deadline", "raised")

    def __init__(self, queued: float, starved: float = STARVED) -> None:
        self._deadline = queued + starved
        self.raised = False

    def check(self) -> None:
        """Between two slices: past the deadline, run as a normal thread (once)."""
        if not self.raised and time.monotonic() > self._deadline:
            self.raised = True
            _policy("SCHED_OTHER")

    def done(self) -> None:
        if self.raised:
            _policy("SCHED_IDLE")


def encode_all(body: bytes, codings: tuple[str, ...], queued: float) -> dict[str, bytes]:
    """``body`` in each of ``codings``, in the compression thread; ``queued``: when it was
    submitted (``time.monotonic()``)."""
    starving = Starving(queued)
    try:
        return {coding: encode(body, coding, starving.check) for coding in codings}
    finally:
        starving.done()


def encode(body: bytes, coding: str, between: Callable[[], None] = lambda: None) -> bytes:
    """The body in ``coding``, fed to the compressor a slice at a time; ``between`` is
    called before each slice."""
    process, finish = _compressor(coding, len(body))
    view = memoryview(body)
    parts = []
    for start in range(0, len(body), SLICE):
        between()
        parts.append(process(view[start : start + SLICE]))
    parts.append(finish())
    return b"".join(parts)


Process = Callable[[memoryview], bytes]


def _compressor(coding: str, size: int) -> tuple[Process, Callable[[], bytes]]:
    if coding == "br":
        br = brotli.Compressor(quality=level_for(coding, size), lgwin=BROTLI_WINDOW)
        return br.process, br.finish
    if coding == "gzip":
        # 16 + 15: the gzip wrapper
        gz = zlib.compressobj(level_for(coding, size), zlib.DEFLATED, 31)
        return gz.compress, gz.flush
    if coding == "zstd":
        zs = zstandard.ZstdCompressor(level=level_for(coding, size)).compressobj(size=size)
        return zs.compress, zs.flush
    raise ValueError(f"cannot compress to {coding!r}")
