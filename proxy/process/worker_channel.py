"""A worker's standard input: the pipe from its node (proxy/process/supervisor.py).

The node holds the other end and writes only questions to it (``inspect`` lines, for a
trace: proxy/wire/worker.py), so end of file means the node is gone (killed, even with
SIGKILL), and a worker without its node drains and exits like on SIGTERM instead of serving
unsupervised. A question is answered at once on standard output, from the event loop: a
trace's read of the store is a dictionary lookup (``MemoryStore.inspect``), or one read
transaction on the shared map (``TieredStore.inspect``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Callable

from proxy.core.cache.trace import Held
from proxy.errors import WireError
from proxy.wire.worker import Inspected, pack_held, pack_worker_line, unpack_inspect

log = logging.getLogger("proxy.worker")

LINE_MAX = 1 << 16  # bytes of one question: a domain and a target


class NodeChannel:
    """Reads the node's questions; ``inspect`` answers them once the store is open."""

    def __init__(self, loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:
        self._loop = loop
        self._stop = stop
        self._fd = sys.stdin.fileno()
        self._pending = b""
        # The store's read for a trace; None until it is open (a question then gets an
        # empty answer: nothing held yet).
        self.inspect: Callable[[str, str], Held] | None = None
        loop.add_reader(self._fd, self._readable)

    def _readable(self) -> None:
        data = os.read(self._fd, 65536)
        if not data:
            self._loop.remove_reader(self._fd)
            log.warning("the node is gone: stopping")
            self._stop.set()
            return
        lines = (self._pending + data).split(b"\n")
        self._pending = lines.pop()
        if len(self._pending) > LINE_MAX:
            log.warning("a line from the node over %d bytes: dropped", LINE_MAX)
            self._pending = b""
        for line in lines:
            self._answer(line.decode("utf-8", "replace"))

    def _answer(self, text: str) -> None:
        try:
            asked = unpack_inspect(text)
        except WireError as exc:
            log.warning("a line from the node was not read: %s", exc)
            return
        held = Held((), 0, 0) if self.inspect is None else self.inspect(asked.domain, asked.target)
        print(pack_worker_line(Inspected(asked.id, pack_held(held))), flush=True)
