"""Log lines a client can make the edge write: at most one per interval, with a count, and
never a traceback (issue 32 §9, decision 0051).

A client can make many lines happen at will: every request to an origin that fails logs why
(``respond.origin_failed``), every answer broken off after it started, every stale copy
served for an error, every retry on another server, a failed sign-in on the dashboard, an
error page's or a handler's fault (aiohttp's "Error handling request", the API's unexpected
errors), a TLS or socket fault asyncio reports. A thousand of them a second would fill the
disk and bury the lines that matter.

``FloodFilter`` sits on the process's log handler (proxy/process/startup.py ``run``) and
holds back, per logger, level and message template (the format string, before its
arguments), every line after the first for ``every`` seconds (``LOG_EVERY``, 10 s): the
first line after the quiet time says how many were held back ("N more like it since ..."),
so the count is never lost while the trouble goes on. It applies to the loggers a client
reaches (``CLIENT_LOGGERS``), to warnings and errors, and to the info lines marked
``extra=THROTTLED`` (failed sign-ins, peers skipped); other info lines (a token created, a
reload) are an operator's, rare, and always written. A traceback is turned into one line
(the exception's type, text and where it was raised) unless the logger is at DEBUG, where
the whole traceback is kept. Listeners' own lines (connections refused, malformed requests,
an HTTP/2 stream's fault: ``ThrottledLine`` in proxy/edge/connections.py, on the
proxy.connections logger) were throttled already, each kind apart, and are left to it: they
share one template, which this filter would take for one kind.

The table of templates seen is bounded (``MAX_TEMPLATES``): past it, it starts again, which
may let one more line of each through.
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Callable

LOG_EVERY = 10.0  # seconds between two lines of one template (as the listeners' own)
MAX_TEMPLATES = 1024
# The loggers whose lines a client's requests can cause. Not proxy.connections: its lines
# (ThrottledLine) are throttled each by its own kind already, and share one template.
CLIENT_LOGGERS = (
    "proxy.edge",
    "proxy.api",
    "proxy.dashboard",
    "proxy.peers",
    "cdn_proxy.origins",
    "aiohttp",
    "asyncio",
)
# An info line that a client can repeat at will: throttled as warnings are.
THROTTLED = {"throttled": True}


class FloodFilter(logging.Filter):
    """At most one line per template per ``every`` seconds on the client's loggers."""

    def __init__(
        self,
        *,
        every: float = LOG_EVERY,
        clock: Callable[[], float] = time.monotonic,
        loggers: tuple[str, ...] = CLIENT_LOGGERS,
    ) -> None:
        super().__init__()
        self._every = every
        self._clock = clock
        self._loggers = loggers
        # (logger, level, template) -> [end of its quiet time, lines held back in it]
        self._seen: dict[tuple[str, int, str], list[float]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith(self._loggers):
            return True
        if record.levelno < logging.WARNING and not getattr(record, "throttled", False):
            return True
        key = (record.name, record.levelno, str(record.msg))
        now = self._clock()
        entry = self._seen.get(key)
        if entry is not None and now < entry[0]:
            entry[1] += 1
            return False
        held = int(entry[1]) if entry is not None else 0
        if entry is None and len(self._seen) >= MAX_TEMPLATES:
            self._seen.clear()
        self._seen[key] = [now + self._every, 0]
        _one_line(record, held, self._every)
        return True


def _one_line(record: logging.LogRecord, held: int, every: float) -> None:
    """The record as one line: its count of lines held back, its exception (unless its logger
    is at DEBUG) in place of a traceback."""
    suffix = ""
    if held:
        suffix = f" ({held} more like it since the last such line, at most one per {every:.0f} s)"
    info = record.exc_info
    if (
        info
        and info[1] is not None
        and not logging.getLogger(record.name).isEnabledFor(logging.DEBUG)
    ):
        exc = info[1]
        where = traceback.extract_tb(exc.__traceback__)[-1:]
        at = f" at {where[0].filename}:{where[0].lineno}" if where else ""
        text = " ".join(str(exc).split())[:200]
        suffix = f": {type(exc).__name__}: {text}{at}{suffix}"
        record.exc_info = None
        record.exc_text = None
    if suffix:
        record.msg = record.getMessage() + suffix
        record.args = None
