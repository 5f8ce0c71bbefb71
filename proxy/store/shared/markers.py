"""Fill-in-progress markers: one origin request per key for the whole node (issue 23 §2).

A worker that leads the fill of a key in its process also claims the key for the node: it
creates ``fills/<hash of domain and target>`` in the shared tier's directory with
``link`` (atomic across processes), holding "<owner> <deadline>". Another worker that
misses the same key finds the marker live and waits for the entry to appear in the shared
tier (like nginx's ``proxy_cache_lock``) while the marker is live. The marker lives for
``[cache] lock_timeout`` past the leader's latest progress (``renew``: the headers came, more
of the body did), so a slow fill that moves is followed to its end and one that stalls is
given up. The leader removes its marker when its fill ends: committed, not storable, or
failed.

A marker is ignored once its deadline has passed or its owner is gone (a worker killed in the
middle of a fill), and the next claim replaces it. Neither relies on the wall clock nor on a
bare pid, which a crash and a clock stepped back could turn into a dead leader's marker kept
"live" by a stranger given its pid: the owner is named by pid, start time and boot id
(owners.py: a reused pid has another start time), and the deadline is on the boot-time clock
(``CLOCK_BOOTTIME``: one clock for every process of the machine, never stepped, counting
suspend). The directory is locked to one node (lock.py), so an owner is a process of this
machine. The markers are advisory: a fault (the
directory deleted or read-only) makes a claim succeed without a marker, so the worker fetches
by itself, as it would without the shared tier. Each call is one small system call on a
local directory, and never waits on another process.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from collections.abc import Callable
from pathlib import Path

from proxy.store.shared import owners

FILLS = "fills"  # the markers' directory, inside the shared tier's
LIVE, STALE, GONE = "live", "stale", "gone"  # Markers.state


def boot_clock() -> float:
    """Seconds since boot, suspend included: the markers' deadlines (never stepped)."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


class Markers:
    def __init__(self, directory: Path, *, clock: Callable[[], float] = boot_clock) -> None:
        self.directory = directory / FILLS
        self._clock = clock
        self._pid = os.getpid()
        self._owner = owners.me()
        # On a fault every claim succeeds unmarked: no collapsing across workers.
        with contextlib.suppress(OSError):
            self.directory.mkdir(exist_ok=True)

    def _path(self, domain: str, target: str) -> Path:
        digest = hashlib.blake2b(f"{domain}\n{target}".encode(), digest_size=16).hexdigest()
        return self.directory / digest

    def claim(self, domain: str, target: str, lifetime: float) -> str | None:
        """Claim the key's fill for ``lifetime`` seconds. The marker's text (to ``release``)
        when this process leads, "" when it leads unmarked (a fault), None when another live
        process holds it."""
        path = self._path(domain, target)
        text = f"{self._owner} {self._clock() + lifetime:.3f}"
        for _ in range(2):
            try:
                self._link(path, text)
            except FileExistsError:
                if self.held(domain, target):
                    return None
                with contextlib.suppress(OSError):
                    path.unlink()  # a dead one: replaced
                continue
            except OSError:
                return ""
            return text
        return ""

    def _link(self, path: Path, text: str) -> None:
        """Write the marker whole beside it, then link it into place: ``link`` fails when
        the name exists, so a reader never sees half a marker and two claims never both win."""
        spare = path.with_name(f".{path.name}.{self._pid}")
        spare.write_text(text)
        try:
            os.link(spare, path)
        finally:
            spare.unlink()

    def held(self, domain: str, target: str) -> bool:
        """Whether a live process other than this one holds the key's marker."""
        return self.state(domain, target) == LIVE

    def state(self, domain: str, target: str) -> str:
        """The key's marker: LIVE (another live process holds it), STALE (past its deadline,
        its process gone, or this process's own), or GONE (none)."""
        try:
            owner, _, deadline_text = self._path(domain, target).read_text().partition(" ")
            deadline = float(deadline_text)
        except FileNotFoundError:
            return GONE
        except (OSError, ValueError):
            return STALE  # unreadable: never waited on
        live = owner != self._owner and deadline > self._clock() and owners.alive(owner)
        return LIVE if live else STALE

    def renew(self, domain: str, target: str, text: str, lifetime: float) -> str | None:
        """Move the deadline of this process's marker ``text`` to ``lifetime`` seconds from
        now (its fill made progress): the new text, or None when the marker is no longer
        ``text`` (replaced as stale) or cannot be written (a fault)."""
        if not text:
            return None
        path = self._path(domain, target)
        renewed = f"{self._owner} {self._clock() + lifetime:.3f}"
        spare = path.with_name(f".{path.name}.{self._pid}")
        try:
            if path.read_text() != text:
                return None
            spare.write_text(renewed)
            os.replace(spare, path)  # whole, in one step: a reader sees the old or the new
        except OSError:
            with contextlib.suppress(OSError):
                spare.unlink()
            return None
        return renewed

    def release(self, domain: str, target: str, text: str) -> None:
        """Remove the marker if it is still the one ``claim`` wrote."""
        if not text:
            return
        path = self._path(domain, target)
        try:
            if path.read_text() == text:
                path.unlink()
        except OSError:
            pass
