"""Config reload: SIGHUP re-reads the config file the process was started with, and
``cdn-proxy reload --config PATH`` does it from the command line (decision 0020).

A ``Reloader`` holds the config in force. On SIGHUP it reads the file again and checks it
whole (the same ``load_config`` as at start-up); sorts the difference (proxy/config/diff.py)
and refuses a change a reload cannot apply; then calls its hooks, each a synchronous
``reconfigure(config)`` that swaps in the new config's part (the edge's domains and limits,
the control plane's domain list, the metrics' domains...), with no await between them, so
no request sees half of the new config; and last clears the domains removed or re-pointed
(their entries must never answer again: by generation, O(1), decision 0003). A refused
reload changes nothing: the running config stays, and the process keeps serving. Listeners
and connections are never touched, so nothing is dropped, and requests already routed
finish with the domain config they took.

How ``cdn-proxy reload`` finds the process and learns the outcome: the process keeps a small
run file, ``serve-<hash of the config path>.json`` in the run directory (``RunFile``,
``run_directories``), with its pid, its start time (so a pid reused by another process is
never signalled) and the count and outcome of its reloads. The command validates the file
itself, signals the pid, and waits for the count to move; it prints the outcome the process
wrote, and exits non-zero when the process refused the reload.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import signal
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from proxy.config.diff import ConfigChange, diff
from proxy.config.model import Config, load_config_file
from proxy.errors import ConfigError

log = logging.getLogger("proxy.reload")

RUN_DIR_ENV = "CDN_PROXY_RUN_DIR"
WAIT_SECONDS = 30.0  # how long ``cdn-proxy reload`` waits for the process to answer
POLL_SECONDS = 0.05

# A reload's part: swap in the new config. Synchronous and cheap, loading and checking
# everything it needs before it changes anything (it must not fail half-way).
Hook = Callable[[Config], None]
# What runs after the hooks and the clears (a node: its workers' reloads); None is success,
# a string the reason the reload did not take everywhere.
After = Callable[[Config, ConfigChange, str], Awaitable[str | None]]


@dataclass(frozen=True, slots=True)
class Outcome:
    ok: bool
    message: str
    digest: str = ""  # the SHA-256 of the file read, "" when it could not be read


class Reloader:
    """The config in force in this process, and how to change it."""

    def __init__(
        self,
        path: Path,
        config: Config,
        *,
        hooks: Sequence[Hook],
        clear: Callable[[str], Awaitable[object]] | None = None,
        after: After | None = None,
        report: Callable[[Outcome], None] | None = None,
    ) -> None:
        self.path = path
        self.config = config
        self.hooks = list(hooks)  # the lead adds the access log's, TLS certificates'...
        self._clear = clear
        self._after = after
        self._report = report
        self._task: asyncio.Task[None] | None = None
        self._again = False
        self.reloads = 0

    def trigger(self) -> None:
        """Reload soon (the SIGHUP handler). Reloads never overlap: one asked for while
        another runs is made once that one is done, reading the file as it is then."""
        if self._task is not None and not self._task.done():
            self._again = True
            return
        self._task = asyncio.create_task(self._run(), name="config-reload")

    def install(self, loop: asyncio.AbstractEventLoop) -> None:
        loop.add_signal_handler(signal.SIGHUP, self.trigger)

    async def close(self) -> None:
        """Cancel a reload still running (at shutdown)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            self._again = False
            await self.reload()
            if not self._again:
                return

    async def reload(self) -> Outcome:
        """Read the file, and apply it or refuse it; log and report the outcome."""
        outcome = await self._reload()
        self.reloads += 1
        if outcome.ok:
            log.info("config reloaded from %s: %s", self.path, outcome.message)
        else:
            # The message start-up would print, on one line (cdn-proxy: config error: ...).
            log.error("cdn-proxy: %s", outcome.message)
        if self._report is not None:
            self._report(outcome)
        return outcome

    async def _reload(self) -> Outcome:
        try:
            config, digest = load_config_file(self.path)
        except ConfigError as exc:
            return Outcome(False, f"config error: {exc} (reload refused: the running config stays)")
        change = diff(self.config, config)
        if change.refused:
            return Outcome(False, change.refusal(), digest)
        try:
            for hook in self.hooks:
                hook(config)
        except ConfigError as exc:
            # Only a first hook may refuse (the edge's, loading certificates before it changes
            # anything): the running config stays whole.
            return Outcome(False, f"config error: {exc} (reload refused: the running config stays)")
        except Exception:  # a hook's bug: say so, and keep serving with what was applied
            log.exception("a reload hook failed")
            return Outcome(False, "reload failed half-way (a bug: see the log)", digest)
        self.config = config
        if self._clear is not None:
            for domain in change.cleared:
                await self._clear(domain)
        if self._after is not None:
            failure = await self._after(config, change, digest)
            if failure is not None:
                return Outcome(False, failure, digest)
        return Outcome(True, change.summary(), digest)


@asynccontextmanager
async def reloading(
    path: Path,
    config: Config,
    *,
    hooks: Sequence[Hook],
    clear: Callable[[str], Awaitable[object]] | None = None,
    after: After | None = None,
    run_file: bool = True,
    report: Callable[[Outcome], None] | None = None,
) -> AsyncIterator[Reloader]:
    """A process's reloads: SIGHUP handled while inside, and (``run_file``) the run file
    that ``cdn-proxy reload`` finds it by, written now and removed on the way out."""
    file = RunFile(path) if run_file else None

    def reported(outcome: Outcome) -> None:
        if file is not None:
            file.write(reloader.reloads, outcome)
        if report is not None:
            report(outcome)

    reloader = Reloader(path, config, hooks=hooks, clear=clear, after=after, report=reported)
    loop = asyncio.get_running_loop()
    reloader.install(loop)
    if file is not None:
        file.write(0, None)
    try:
        yield reloader
    finally:
        loop.remove_signal_handler(signal.SIGHUP)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)  # while shutting down: not exit 129
        await reloader.close()
        if file is not None:
            file.remove()


def domains_hook(set_domains: Callable[[Sequence[str]], None]) -> Hook:
    """A hook that passes the new domain names on (telemetry's per-domain series)."""
    return lambda config: set_domains([domain.name for domain in config.domains])


# -- the run file: how ``cdn-proxy reload`` finds the process and hears back ---------------------


def run_directories() -> list[Path]:
    """Where run files are looked for, in order: $CDN_PROXY_RUN_DIR alone when set, else
    $XDG_RUNTIME_DIR/cdn-proxy (when set) and /tmp/cdn-proxy-UID. A process writes to the
    first it can use; ``cdn-proxy reload`` looks in each (a shell and a process started
    without a login session disagree about XDG_RUNTIME_DIR)."""
    given = os.environ.get(RUN_DIR_ENV)
    if given:
        return [Path(given)]
    directories = []
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        directories.append(Path(runtime) / "cdn-proxy")
    directories.append(Path(tempfile.gettempdir()) / f"cdn-proxy-{os.getuid()}")
    return directories


def run_file_name(config_path: Path) -> str:
    """One run file per config file: the same name from any working directory."""
    resolved = str(config_path.resolve()).encode("utf-8", "surrogateescape")
    return f"serve-{hashlib.sha256(resolved).hexdigest()[:16]}.json"


def _usable(directory: Path) -> bool:
    """Create the directory (0700) if need be; usable if it is ours and no one else's to
    write (in /tmp anyone could have made it first, to feed us a pid to signal)."""
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        status = directory.lstat()
    except OSError:
        return False
    return (
        directory.is_dir()
        and not directory.is_symlink()
        and status.st_uid == os.getuid()
        and not status.st_mode & 0o022
    )


def process_start(pid: int) -> int | None:
    """The process's start time (clock ticks since boot, /proc/PID/stat field 22): with the
    pid, it names one process for good, however pids are reused."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[19])


class RunFile:
    """This process's run file: written at start, after each reload, removed at exit."""

    def __init__(self, config_path: Path) -> None:
        self._config = str(config_path.resolve())
        self._pid = os.getpid()
        self._start = process_start(self._pid)
        self.path: Path | None = None
        for directory in run_directories():
            if _usable(directory):
                self.path = directory / run_file_name(config_path)
                break
        if self.path is None:
            log.warning(
                "no usable run directory (%s): `cdn-proxy reload` cannot find this process;"
                " SIGHUP still reloads",
                ", ".join(map(str, run_directories())),
            )

    def write(self, reloads: int, outcome: Outcome | None) -> None:
        if self.path is None:
            return
        record = {
            "pid": self._pid,
            "start": self._start,
            "config": self._config,
            "reloads": reloads,
            "ok": True if outcome is None else outcome.ok,
            "message": "started" if outcome is None else outcome.message,
        }
        temporary = self.path.with_name(self.path.name + ".tmp")
        try:
            temporary.write_text(json.dumps(record), encoding="utf-8")
            temporary.replace(self.path)  # readers see the old record or the new, whole
        except OSError as exc:
            log.warning("cannot write the run file %s (%s)", self.path, exc)

    def remove(self) -> None:
        if self.path is not None:
            with contextlib.suppress(OSError):
                self.path.unlink()


# -- the command line's side -----------------------------------------------------------------


class ReloadFailed(Exception):
    """``cdn-proxy reload`` could not reload, with the reason (one line)."""


@dataclass(frozen=True, slots=True)
class Running:
    pid: int
    reloads: int
    path: Path


def find_running(config_path: Path) -> Running:
    """The live ``cdn-proxy serve`` started with this config file, from its run file."""
    name = run_file_name(config_path)
    for directory in run_directories():
        record = _read(directory / name)
        if record is None:
            continue
        pid = record.get("pid")
        start = record.get("start")
        if isinstance(pid, int) and start is not None and process_start(pid) == start:
            return Running(pid=pid, reloads=_reloads(record), path=directory / name)
    places = ", ".join(str(d / name) for d in run_directories())
    raise ReloadFailed(
        f"no running `cdn-proxy serve --config {config_path}` found (no live process in {places})"
    )


def _reloads(record: dict[str, object]) -> int:
    count = record.get("reloads")
    return count if isinstance(count, int) else 0


def _read(path: Path) -> dict[str, object] | None:
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def request_reload(config_path: Path, *, wait: float = WAIT_SECONDS) -> str:
    """Signal the running process to reload and wait for its outcome: its message, or
    ReloadFailed with it. The caller has checked the file already."""
    running = find_running(config_path)
    try:
        os.kill(running.pid, signal.SIGHUP)
    except ProcessLookupError:
        raise ReloadFailed(f"the process (pid {running.pid}) has exited") from None
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        record = _read(running.path)
        if record is not None and _reloads(record) > running.reloads:
            message = str(record.get("message", ""))
            if record.get("ok") is True:
                return message
            raise ReloadFailed(message.removeprefix("cdn-proxy: "))
        if process_start(running.pid) is None:
            raise ReloadFailed(f"the process (pid {running.pid}) exited during the reload")
        time.sleep(POLL_SECONDS)  # the command line's own wait, bounded by the deadline
    raise ReloadFailed(
        f"the process (pid {running.pid}) was signalled but said nothing within {wait:g} s;"
        " see its log"
    )
