"""A cache directory belongs to one node (decision 0030).

The node's control process (or its only process) takes ``flock(LOCK_EX)`` on ``<dir>/lock`` and
writes into it who holds it: its pid, a random instance id, and the boot it runs in. A second
node on the same directory cannot take the lock and gets ``CacheDirectoryLocked``, naming the
directory and the holder.

The node's workers are given its instance id (an argument of ``open_member``). A worker proves
it belongs to the holder in two steps: the lock file names that instance, and the lock is held
(a shared lock on a descriptor of its own would be refused: only a live holder's exclusive lock
refuses it). A worker of a node that died, or of another node, is refused.

The boot record (``<dir>/boot``) says whether the entries may be trusted after the last run:
"<boot id> open" while a node has the directory, "<boot id> clean" once it closed it cleanly.
Opened as "open" under another boot id, the last run ended in an OS crash or a power loss,
which can tear unsynced entries: the caller then empties them (``unclean_since_boot``).
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from proxy.errors import CacheDirectoryLocked

LOCK_FILE = "lock"
BOOT_FILE = "boot"


def boot_id() -> str:
    """This boot of the machine, as the kernel names it (a fixed string where it cannot)."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "unknown"


@dataclass(frozen=True, slots=True)
class Holder:
    """Who holds the lock, as the lock file records it: one JSON object, written by ``record``
    and read back by ``read``."""

    pid: int
    instance: str

    @classmethod
    def read(cls, path: Path) -> Holder | None:
        """The holder the lock file at ``path`` names, None when it names none."""
        try:
            record = json.loads(path.read_text())
            return cls(pid=int(record["pid"]), instance=str(record["instance"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def record(self) -> bytes:
        return json.dumps({"pid": self.pid, "instance": self.instance}).encode()

    def describe(self) -> str:
        return f"pid {self.pid} (instance {self.instance})"


class NodeLock:
    """The node's exclusive hold on a cache directory, until ``release``."""

    def __init__(self, directory: Path, fd: int, holder: Holder) -> None:
        self.directory = directory
        self.holder = holder
        self._fd = fd

    @classmethod
    def acquire(cls, directory: Path) -> NodeLock:
        path = directory / LOCK_FILE
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            held = Holder.read(path)
            raise CacheDirectoryLocked(
                str(directory), held.describe() if held else "another process"
            ) from None
        holder = Holder(pid=os.getpid(), instance=secrets.token_hex(8))
        os.ftruncate(fd, 0)
        os.pwrite(fd, holder.record(), 0)
        return cls(directory, fd, holder)

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # closing the descriptor releases the flock
            self._fd = -1


def check_member(directory: Path, instance: str) -> None:
    """Raise ``CacheDirectoryLocked`` unless the directory is held, by the node ``instance``
    names."""
    path = directory / LOCK_FILE
    held = Holder.read(path)
    if held is None or held.instance != instance:
        holder = held.describe() if held else "no node"
        raise CacheDirectoryLocked(str(directory), f"{holder}, not instance {instance}")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as error:
        raise CacheDirectoryLocked(str(directory), f"nothing readable ({error})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return  # refused: the holder is alive
    finally:
        os.close(fd)
    raise CacheDirectoryLocked(str(directory), f"{held.describe()}, which no longer runs")


def unclean_since_boot(directory: Path) -> bool:
    """Did the last node to hold the directory stop without closing it, in another boot?"""
    try:
        boot, _, state = (directory / BOOT_FILE).read_text().strip().partition(" ")
    except OSError:
        return False
    return state != "clean" and boot != boot_id()


def write_boot(directory: Path, state: str) -> None:
    """Record "<boot id> <state>" durably (write, fsync, rename, fsync of the directory)."""
    path = directory / BOOT_FILE
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as out:
        out.write(f"{boot_id()} {state}\n")
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
