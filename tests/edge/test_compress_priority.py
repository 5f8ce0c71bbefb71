"""The compression thread yields the core to the event loop (decisions 0051, 0061): the HTTP/2
soak's compression misses took hits' p99 past twice the unloaded one on a one-core server,
with the thread niced as well. It runs under Linux's SCHED_IDLE policy (a thread's own)."""

from __future__ import annotations

import os
import sys
import threading

import pytest

from proxy.edge.compress import Compressions


@pytest.mark.skipif(sys.platform != "linux", reason="a thread's own scheduling policy is Linux's")
async def test_the_compression_thread_runs_below_the_loop() -> None:
    compressions = Compressions(1 << 20)
    seen: list[int] = []
    made = compressions.submit(b"compress me " * 1000, ("gzip",))
    assert made is not None
    assert (await made)["gzip"]
    for thread in threading.enumerate():
        if thread.name.startswith("compress") and thread.native_id is not None:
            seen.append(os.sched_getscheduler(thread.native_id))
    await compressions.close()
    assert seen == [os.SCHED_IDLE]
    assert os.sched_getscheduler(threading.get_native_id()) == os.SCHED_OTHER  # the loop's
