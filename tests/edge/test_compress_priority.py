"""The compression thread yields the core to the event loop (decisions 0051, 0061): the HTTP/2
soak's compression misses took hits' p99 past twice the unloaded one on a one-core server,
with the thread niced as well. It runs under Linux's SCHED_IDLE policy (a thread's own)."""

from __future__ import annotations

import os
import sys
import threading
import time
import zlib

import pytest

from proxy.edge.compress import STARVED, Compressions, Starving, _yield_to_the_loop, encode


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


@pytest.mark.skipif(sys.platform != "linux", reason="a thread's own scheduling policy is Linux's")
def test_a_body_that_waited_too_long_runs_as_a_normal_thread_then_idle_again() -> None:
    """SCHED_IDLE alone would starve compression on a node whose cores never idle: a body
    queued STARVED seconds ago has the rest of its work run as a normal (niced) thread."""
    policies: list[int] = []

    def compression_thread() -> None:
        _yield_to_the_loop()
        policies.append(os.sched_getscheduler(0))
        fresh = Starving(time.monotonic())
        fresh.check()
        policies.append(os.sched_getscheduler(0))
        starved = Starving(time.monotonic() - STARVED - 1)
        copy = encode(b"compress me " * 20_000, "gzip", starved.check)
        policies.append(os.sched_getscheduler(0))
        starved.done()
        policies.append(os.sched_getscheduler(0))
        assert zlib.decompress(copy, 31) == b"compress me " * 20_000

    thread = threading.Thread(target=compression_thread)
    thread.start()
    thread.join()
    assert policies == [os.SCHED_IDLE, os.SCHED_IDLE, os.SCHED_OTHER, os.SCHED_IDLE]
