"""The soak's server (benchmarks/soak.py): one ``python -m proxy serve`` as an operator runs it.

Its config is written once, with fixed ports, so a restart after ``kill -9`` listens where
the first start did and opens the same state database. The node runs in a session of its
own, pinned with ``taskset`` to the server core, its standard error appended to
``server.log``; killing acts on its whole process group (with ``workers``, the control
process, the worker processes and the embedded Valkey).

Also here: the ``token`` commands the soak runs (as an operator would, through the CLI),
the per-second sample of the node's memory and open files, and the audit log read back
from the state database after a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import sqlite3
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from benchmarks.systems import CHILD_ENV, free_port, token_command, wait_listening

ENV = CHILD_ENV  # the node runs this checkout's ``proxy``
START_TIMEOUT = 60.0


@dataclass(frozen=True, slots=True)
class Sample:
    at: float  # seconds since the soak started
    rss: int  # bytes, summed over the node's processes (VmRSS: shared pages in each)
    fds: int  # open file descriptors, summed likewise
    processes: int
    pss: int = 0  # bytes, summed likewise (Pss of smaps_rollup: a shared page counts once)


@dataclass(frozen=True, slots=True)
class AuditRow:
    at: float  # the server's wall clock when it took the request
    actor: str
    domain: str
    status: int


class SoakServer:
    def __init__(
        self,
        directory: Path,
        *,
        origin_url: str,
        domains: Sequence[str],
        max_bytes: int,
        workers: int,
        cpu: str,
        disk_max_bytes: int | None = None,
        cache_extra: str = "",
    ) -> None:
        self.directory = directory
        self.config = directory / "proxy.toml"
        self.state = directory / "state.db"
        self.cpu = cpu
        self.workers = workers
        self.edge_port, self.api_port = free_port(), free_port()
        self.edge_url = f"http://127.0.0.1:{self.edge_port}"
        self.api_url = f"http://127.0.0.1:{self.api_port}"
        self.process: asyncio.subprocess.Process | None = None
        self.starts = 0
        self._log: TextIO | None = None
        domain_tables = "".join(
            f'[[domains]]\nname = "{name}"\norigin = "{origin_url}"\nread_timeout = 10\n'
            for name in domains
        )
        # A run starts from nothing: a directory left by an earlier run with the same --out
        # holds its tokens (a second "soak" token is refused) and its cache.
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True)
        # --disk: the shared tier, as config/proxy.toml turns it on (a directory per node).
        disk = (
            ""
            if disk_max_bytes is None
            else f'disk_path = "cache"\ndisk_max_bytes = {disk_max_bytes}\n{cache_extra}'
        )
        self.config.write_text(
            f'[edge]\nlisten = "127.0.0.1:{self.edge_port}"\nshutdown_timeout = 3\n'
            f"workers = {workers}\n"
            f'[api]\nlisten = "127.0.0.1:{self.api_port}"\n'
            f"[cache]\nmax_bytes = {max_bytes}\n{disk}"
            # Every record of the run is kept, so that none is missing for a mere rotation.
            f'[state]\npath = "state.db"\naudit_max_rows = 100000000\n' + domain_tables,
            encoding="utf-8",
        )

    @property
    def argv(self) -> list[str]:
        serve = [sys.executable, "-m", "proxy", "serve", "--config", str(self.config)]
        return ["taskset", "-c", self.cpu, *serve]

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    async def start(self) -> None:
        """Start the node and return once it has printed its edge and API addresses."""
        self._log = (self.directory / "server.log").open("a", encoding="utf-8")
        self.process = await asyncio.create_subprocess_exec(
            *self.argv,
            stdout=asyncio.subprocess.PIPE,
            stderr=self._log,
            stdin=asyncio.subprocess.DEVNULL,
            env=ENV,
            start_new_session=True,
        )
        try:
            async with asyncio.timeout(START_TIMEOUT):
                await wait_listening(
                    self.process,
                    ("edge", "api"),
                    exited=f"the server exited: see {self.directory}/server.log",
                )
        except BaseException:
            await self.kill()
            raise
        self.starts += 1

    async def kill(self) -> None:
        """kill -9 the node's whole process group, and reap it."""
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        await self.process.wait()
        self.process = None
        if self._log is not None:
            self._log.close()
            self._log = None

    async def stop(self) -> float | None:
        """SIGTERM, as an operator stops it; kill -9 what is left after 15 s. Returns the
        seconds the node took to exit, or None when it had to be killed."""
        if self.process is None:
            return None
        loop = asyncio.get_running_loop()
        started = loop.time()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            async with asyncio.timeout(15):
                await self.process.wait()
        except TimeoutError:
            await self.kill()
            return None
        took = loop.time() - started
        await self.kill()  # reaps nothing more; closes the log
        return took

    def sample(self, at: float) -> Sample | None:
        """RSS, PSS and open fds of the node and every process below it, now."""
        if self.process is None:
            return None
        rss = pss = fds = count = 0
        for pid in _tree(self.process.pid):
            try:
                status = Path(f"/proc/{pid}/status").read_text()
                opened = len(os.listdir(f"/proc/{pid}/fd"))
            except OSError:  # it ended between the listing and the read
                continue
            # a zombie has no VmRSS line
            rss_lines = (line.split()[1] for line in status.splitlines() if line[:6] == "VmRSS:")
            kib = next(rss_lines, "0")
            rss += int(kib) * 1024
            pss += _pss(pid)
            fds += opened
            count += 1
        return Sample(at, rss, fds, count, pss) if count else None

    async def token(self, *args: str) -> str:
        """``cdn-proxy token ARGS --config PATH``: what it printed (a token, for create and
        regenerate)."""
        return await token_command(self.config, *args)

    def audit(self) -> list[AuditRow]:
        """Every audit record in the state database (read-only, beside the running server)."""
        uri = f"file:{self.state}?mode=ro"
        with contextlib.closing(sqlite3.connect(uri, uri=True, timeout=10)) as conn:
            rows = conn.execute("SELECT at, actor, domain, status FROM audit").fetchall()
        return [
            AuditRow(float(at), str(actor), str(domain), int(st)) for at, actor, domain, st in rows
        ]


def _pss(pid: int) -> int:
    """The process's proportional set size in bytes: each page it maps divided by the number
    of processes mapping it, so the shared tier's LMDB map, mapped by every process of the
    node, counts once in the sum (/proc/PID/smaps_rollup, Linux 4.14). 0 when unreadable."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return 0
    for line in text.splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) * 1024
    return 0


def _tree(pid: int) -> list[int]:
    """``pid`` and every process below it."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        try:
            tasks = os.listdir(f"/proc/{current}/task")
        except OSError:
            continue
        for task in tasks:
            with contextlib.suppress(OSError):
                text = Path(f"/proc/{current}/task/{task}/children").read_text()
                todo.extend(int(child) for child in text.split())
    return found
