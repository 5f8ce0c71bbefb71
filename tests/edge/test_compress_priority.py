"""The compression thread yields the core to the event loop (decision 0051): the HTTP/2
soak's compression misses took hits' p99 past twice the unloaded one on a one-core server.
Its nice value is NICE above the loop thread's (Linux: a thread's own priority)."""

from __future__ import annotations

import os
import sys
import threading

import pytest

from proxy.edge.compress import NICE, Compressions


@pytest.mark.skipif(sys.platform != "linux", reason="a thread's own nice value is Linux's")
async def test_the_compression_thread_runs_below_the_loop() -> None:
    compressions = Compressions(1 << 20)
    seen: list[int] = []
    made = compressions.submit(b"compress me " * 1000, ("gzip",))
    assert made is not None
    await made
    for thread in threading.enumerate():
        if thread.name.startswith("compress") and thread.native_id is not None:
            seen.append(os.getpriority(os.PRIO_PROCESS, thread.native_id))
    await compressions.close()
    loop_nice = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    assert seen == [min(19, loop_nice + NICE)]
