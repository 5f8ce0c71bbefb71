"""The shared tier's faults: counted, logged once per interval, readable as a status.

The tier never raises a disk fault into its caller (decision 0030): a lookup that fails is a
miss, a fill that fails is dropped. What happened is kept here, for ``/readyz``, the
dashboard and ``/metrics`` to read: ``degraded`` names the last fault (None when the last
write worked; the status still shows it for SHOWN seconds), the counters count them. A
*stuck* fault (the directory was deleted or replaced, or a purge could not be made durable)
stops the tier serving until the node restarts: after it, nothing it holds can be trusted to
honour every purge.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger("proxy.store.shared")

LOG_INTERVAL = 10.0  # seconds between two log lines about faults of one tier
SHOWN = 60.0  # seconds a fault keeps the tier degraded in its status, whatever works since


@dataclass(frozen=True, slots=True)
class TierStatus:
    degraded: str | None  # the last fault, None when healthy
    stuck: bool  # not serving until restarted
    faults: int  # I/O errors, full disk, missing directory: every failed call
    corrupt: int  # entries or bodies that failed their checksum (removed, never served)
    dropped_fills: int  # fills not stored because of a fault


class Health:
    def __init__(
        self,
        directory: str,
        *,
        interval: float = LOG_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.directory = directory
        self.degraded: str | None = None
        self.stuck = False
        self.faults = 0
        self.corrupt = 0
        self.dropped_fills = 0
        self._interval = interval
        self._clock = clock
        self._logged_at: float | None = None
        self._unlogged = 0
        self._shown: str | None = None  # the last fault, in the status until _shown_until
        self._shown_until = 0.0

    def fault(self, what: str, error: BaseException, *, stuck: bool = False) -> None:
        self.faults += 1
        self._set(f"{what}: {error}")
        self.stuck = self.stuck or stuck
        self._log(logging.ERROR if stuck else logging.WARNING)

    def corrupted(self, what: str) -> None:
        self.corrupt += 1
        self._set(f"corrupt entry: {what}")
        self._log(logging.WARNING)

    def _set(self, degraded: str) -> None:
        """The current fault. The status shows it for SHOWN seconds even once a fill works
        again: a small fill that lands says nothing of a large one's body file (a read-only
        directory), nor of the disk's other blocks (a corrupt entry), and a probe of
        /readyz must not miss a fault that comes back every few requests."""
        self.degraded = self._shown = degraded
        self._shown_until = self._clock() + SHOWN

    def recovered(self) -> None:
        if not self.stuck:
            self.degraded = None

    def status(self) -> TierStatus:
        degraded = self.degraded
        if degraded is None and self._shown is not None and self._clock() < self._shown_until:
            degraded = self._shown
        return TierStatus(degraded, self.stuck, self.faults, self.corrupt, self.dropped_fills)

    def _log(self, level: int) -> None:
        now = self._clock()
        if self._logged_at is not None and now - self._logged_at < self._interval:
            self._unlogged += 1
            return
        more = f" ({self._unlogged} more since the last report)" if self._unlogged else ""
        stopped = "; not serving from it until restarted" if self.stuck else ""
        log.log(level, "shared tier %s: %s%s%s", self.directory, self.degraded, more, stopped)
        self._logged_at = now
        self._unlogged = 0
