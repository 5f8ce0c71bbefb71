"""Which process owns a file of the shared tier, robustly: its pid, its start time and the boot.

A pid alone names a process only while it lives: after a crash the kernel may give it to
another process, and a check by ``kill(pid, 0)`` then finds the stranger alive. A wall-clock
deadline does not help either (the clock may step back). So an owner is named by three
things the kernel keeps, none of them the wall clock: the boot id
(``/proc/sys/kernel/random/boot_id``), the pid, and the process's start time in clock ticks
since boot (field 22 of ``/proc/PID/stat``). A reused pid has a later start time; a pid of an
earlier boot has another boot id. (Where ``/proc`` is missing, the start time reads as 0 and
the check falls back to the pid's liveness.)
"""

from __future__ import annotations

import os
from functools import cache

from proxy.store.shared.lock import boot_id


def start_time(pid: int) -> int | None:
    """The process's start time, in clock ticks after boot: None when no such process runs,
    0 when it runs but ``/proc`` cannot say."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            text = stat.read()
    except FileNotFoundError:
        return None
    except OSError:
        return 0 if _running(pid) else None
    # The command name, in parentheses, may hold spaces and parentheses: fields follow the last ")".
    fields = text[text.rfind(b")") + 2 :].split()
    try:
        return int(fields[19])  # field 22 of the line; the 20th after the name
    except (IndexError, ValueError):
        return 0


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@cache
def _boot() -> str:
    return boot_id()


def me() -> str:
    """This process as an owner: "<pid>.<start time>.<boot id's first 8 characters>"."""
    pid = os.getpid()
    return f"{pid}.{start_time(pid) or 0}.{_boot()[:8]}"


def alive(owner: str) -> bool:
    """Whether the process ``me`` named as ``owner`` still runs (False for a name that does
    not parse: no live owner wrote it)."""
    pid_text, _, rest = owner.partition(".")
    start_text, _, boot = rest.partition(".")
    try:
        pid, started = int(pid_text), int(start_text)
    except ValueError:
        return False
    if boot != _boot()[:8]:
        return False
    now = start_time(pid)
    if now is None:
        return False
    return now == started or 0 in (now, started)
