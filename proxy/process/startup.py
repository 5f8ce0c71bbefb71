"""What every process of a node does when it starts, in one place: the one-process service
(service.py), a node (node.py) and each of its edge workers (worker.py).

- ``run`` sets up logging (one format; a worker's lines name it; the lines clients can
  cause at most one per interval: proxy/observe/log_floods.py), raises the open-files limit
  (proxy/edge/connections.py), and runs the process's main coroutine on uvloop where it is
  installed; a ``ProxyError`` that ends it is one line on standard error and exit status 1
  (2 for a cache directory another node holds, as for a config error).
- ``stop_on_signals`` gives the event that SIGTERM and SIGINT set.
- ``freeze_heap``, once a process has started serving, moves what start-up made out of the
  garbage collector's reach (decision 0011).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from proxy.edge.connections import raise_open_files_limit
from proxy.errors import CacheDirectoryLocked, ProxyError
from proxy.observe.log_floods import FloodFilter

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s{who} %(message)s"


def run(main: Callable[[], Coroutine[Any, Any, int]], *, who: str = "") -> int:
    """Run ``main()`` as this process's life; return its exit status. ``who`` follows the
    logger's name on every log line (a worker's ``[worker 2]``)."""
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT.format(who=who))
    floods = FloodFilter()  # what clients can cause: a line per interval (decision 0051)
    for handler in logging.getLogger().handlers:
        handler.addFilter(floods)
    raise_open_files_limit()
    with event_loop_runner() as runner:
        try:
            return runner.run(main())
        except CacheDirectoryLocked as exc:  # another node's directory: as a config error
            print(f"cdn-proxy: {exc}", file=sys.stderr)
            return 2
        except ProxyError as exc:
            print(f"cdn-proxy: {exc}", file=sys.stderr)
            return 1


def event_loop_runner() -> asyncio.Runner:
    """The process's event loop: uvloop where it is installed."""
    try:
        import uvloop
    except ImportError:
        return asyncio.Runner()
    return asyncio.Runner(loop_factory=uvloop.new_event_loop)


def stop_on_signals() -> asyncio.Event:
    """An event SIGTERM and SIGINT set: the running loop's handlers for both."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop


def freeze_heap() -> None:
    """Everything made so far (modules, config, the app) lives as long as the process: move
    it out of the garbage collector's reach, so a full collection walks only what is made
    while serving. With ~45k objects from imports alone, every full collection otherwise
    stalled all requests for milliseconds (benchmarks/README.md)."""
    gc.collect()
    gc.freeze()
