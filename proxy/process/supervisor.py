"""Edge worker processes: started, restarted when they die, and stopped together.

Each worker is a process of its own (``python -m proxy worker ...``: proxy/process/worker.py)
with its own memory store and event loop, listening on the shared edge port (SO_REUSEPORT, so
the kernel spreads connections among them). A worker says it is ready by printing one line,
``ready``, on its standard output; everything else it says goes to its standard error, which is
this process's.

A worker that exits while the node is running is started again at once; one that dies within
a second of starting is restarted after a delay that doubles up to ``MAX_RESTART_DELAY``, so
a worker that cannot start does not spin. Every restart is logged and counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Callable, Sequence

from proxy.core.cache.trace import Held
from proxy.errors import ProxyError, WireError
from proxy.wire.worker import (
    Inspect,
    Inspected,
    Ready,
    pack_inspect,
    unpack_held,
    unpack_worker_line,
)

log = logging.getLogger("proxy.supervisor")

READY_TIMEOUT = 60.0  # seconds a new worker may take to listen
QUICK_DEATH = 1.0  # a worker that dies sooner than this after starting is restarted later
MAX_RESTART_DELAY = 5.0
LINE_LIMIT = 1 << 20  # bytes of one line a worker prints (an inspected answer is the longest)


class WorkerStartError(ProxyError):
    """A worker did not come up at start-up."""


class Workers:
    """``count`` worker processes, each started as ``argv(index)``."""

    def __init__(
        self,
        argv: Callable[[int], Sequence[str]],
        count: int,
        *,
        on_restart: Callable[[int], None] | None = None,
        pass_fds: Sequence[int] = (),
    ) -> None:
        """``pass_fds``: descriptors every worker inherits (the node's standard output, for
        an access log on "-")."""
        self._pass_fds = tuple(pass_fds)
        self._argv = argv
        self._count = count
        self._on_restart = on_restart
        self._processes: dict[int, asyncio.subprocess.Process] = {}
        # What each ready worker prints after ``ready`` (its reload outcomes), by its pid,
        # read by a task per worker until its output ends.
        self._said: dict[int, asyncio.Queue[str]] = {}
        self._readers: dict[int, asyncio.Task[None]] = {}
        self._keepers: list[asyncio.Task[None]] = []
        self._stopping = False
        self.restarts = 0
        # Questions asked of the workers (``inspect``), by their id, until answered.
        self._asked: dict[int, asyncio.Future[Held]] = {}
        self._next_id = 0

    @property
    def pids(self) -> dict[int, int]:
        """Worker index -> pid of the process now running it."""
        return {index: process.pid for index, process in self._processes.items()}

    async def start(self) -> None:
        """Start every worker and wait until each is ready; then keep them running. Raises
        WorkerStartError (with every started worker stopped) if one cannot start."""
        try:
            await asyncio.gather(*(self._spawn(index) for index in range(self._count)))
        except WorkerStartError:
            await self.stop(grace=5.0)
            raise
        self._keepers = [
            asyncio.create_task(self._keep(index), name=f"worker-{index}")
            for index in range(self._count)
        ]

    async def stop(self, *, grace: float) -> None:
        """SIGTERM every worker (each drains its connections), and SIGKILL any still running
        after ``grace`` seconds."""
        self._stopping = True
        for task in [*self._keepers, *self._readers.values()]:
            task.cancel()
        for task in [*self._keepers, *self._readers.values()]:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        processes = list(self._processes.values())
        for process in processes:
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(signal.SIGTERM)
        try:
            async with asyncio.timeout(grace):
                await asyncio.gather(*(process.wait() for process in processes))
        except TimeoutError:
            for process in processes:
                if process.returncode is None:
                    log.warning("edge worker pid %d did not stop in time: killed", process.pid)
                    with contextlib.suppress(ProcessLookupError):
                        process.kill()
            await asyncio.gather(*(process.wait() for process in processes))

    def send(self, sig: int) -> None:
        """Send ``sig`` to every running worker (SIGUSR1: reopen the access log)."""
        for process in self._processes.values():
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(sig)

    async def _spawn(self, index: int) -> None:
        # Its standard input is a pipe only this process writes to (a trace's questions,
        # ``inspect``): when this process ends, however it ends, the pipe closes and the
        # worker stops (proxy/process/worker_channel.py).
        process = await asyncio.create_subprocess_exec(
            *self._argv(index),
            stdout=asyncio.subprocess.PIPE,
            stdin=asyncio.subprocess.PIPE,
            pass_fds=self._pass_fds,
            limit=LINE_LIMIT,
        )
        self._processes[index] = process
        assert process.stdout is not None
        try:
            async with asyncio.timeout(READY_TIMEOUT):
                line = await process.stdout.readline()
        except TimeoutError:
            line = b""
        if not _ready(line):
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            code = await process.wait()
            raise WorkerStartError(f"edge worker {index} did not start (exit status {code})")
        log.info("edge worker %d ready (pid %d)", index, process.pid)
        said = self._said[process.pid] = asyncio.Queue()
        self._readers[index] = asyncio.create_task(
            self._read(process, said), name=f"worker-{index}-output"
        )

    async def _read(self, process: asyncio.subprocess.Process, said: asyncio.Queue[str]) -> None:
        assert process.stdout is not None
        try:
            while line := await process.stdout.readline():
                text = line.decode("utf-8", "replace").strip()
                if not self._answered(text):
                    said.put_nowait(text)
        except ValueError:  # a line over LINE_LIMIT: the worker is not one this node reads
            log.error("edge worker pid %d printed a line too long to read", process.pid)
        finally:
            self._said.pop(process.pid, None)

    def _answered(self, text: str) -> bool:
        """Whether ``text`` answers a question asked by ``inspect`` (then it is handed over)."""
        if not text.startswith("inspected "):
            return False
        try:
            said = unpack_worker_line(text)
        except WireError as exc:
            log.warning("an edge worker's answer was not read: %s", exc)
            return True
        if isinstance(said, Inspected):
            waiting = self._asked.get(said.id)
            if waiting is not None and not waiting.done():
                waiting.set_result(unpack_held(said.held))
        return True

    async def inspect(self, domain: str, target: str, *, wait: float) -> dict[int, Held | None]:
        """What each ready worker's store holds for ``target`` (a trace's read: it changes
        nothing there): worker index -> its answer, or None if it gave none within ``wait``
        seconds (it is starting, or stuck)."""
        asked: dict[int, asyncio.Future[Held]] = {}
        loop = asyncio.get_running_loop()
        idents = []
        for index, process in sorted(self._processes.items()):
            if process.returncode is not None or process.pid not in self._said:
                continue  # starting or gone: not ready to answer
            assert process.stdin is not None
            self._next_id += 1
            idents.append(self._next_id)
            asked[index] = self._asked[self._next_id] = loop.create_future()
            line = pack_inspect(Inspect(self._next_id, domain, target)) + "\n"
            try:
                process.stdin.write(line.encode())
            except (ConnectionError, RuntimeError):  # its input closed: it is going
                asked[index].cancel()
        try:
            if asked:
                await asyncio.wait(asked.values(), timeout=wait)
        finally:
            for ident in idents:
                self._asked.pop(ident, None)
        return {
            index: future.result() if future.done() and not future.cancelled() else None
            for index, future in asked.items()
        }

    async def reload(self, *, wait: float) -> dict[int, str | None]:
        """SIGHUP every ready worker (each re-reads the config file: proxy/process/worker.py) and
        collect the line each prints about it: worker index -> that line, or None if it did
        not answer within ``wait`` seconds. A worker starting now is not signalled: it
        reads the file as it starts."""
        waiting: dict[int, asyncio.Queue[str]] = {}
        for index, process in self._processes.items():
            said = self._said.get(process.pid)
            if said is None or process.returncode is not None:
                continue
            while not said.empty():  # what it said of reloads it made by itself
                said.get_nowait()
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGHUP)
                waiting[index] = said

        async def answer(said: asyncio.Queue[str]) -> str | None:
            try:
                async with asyncio.timeout(wait):
                    return await said.get()
            except TimeoutError:
                return None

        answers = await asyncio.gather(*(answer(said) for said in waiting.values()))
        return dict(zip(waiting, answers, strict=True))

    async def _keep(self, index: int) -> None:
        """Restart worker ``index`` whenever it exits, until the node stops."""
        delay = 0.0
        while True:
            started = time.monotonic()
            process = self._processes[index]
            code = await process.wait()
            if self._stopping:
                return
            quick = time.monotonic() - started < QUICK_DEATH
            delay = min(max(delay * 2, 0.1), MAX_RESTART_DELAY) if quick else 0.0
            self.restarts += 1
            if self._on_restart is not None:
                self._on_restart(index)
            log.warning(
                "edge worker %d (pid %d) exited with status %s; restarting%s",
                index,
                process.pid,
                code,
                f" in {delay:.1f} s" if delay else "",
            )
            if delay:
                await asyncio.sleep(delay)  # a back-off, not a synchronisation
            try:
                await self._spawn(index)
            except WorkerStartError as exc:
                log.error("%s", exc)


def _ready(line: bytes) -> bool:
    """Whether a worker's first line says it is ready (proxy/wire/worker.py)."""
    try:
        return isinstance(unpack_worker_line(line.decode("utf-8", "replace").strip()), Ready)
    except WireError:
        return False
