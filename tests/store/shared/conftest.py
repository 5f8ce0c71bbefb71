"""Fixtures for the shared tier: a node's tier on a real directory, and other processes."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from proxy.store.shared import SharedTier


@pytest.fixture
def tier(tmp_path: Path) -> Iterator[SharedTier]:
    opened = SharedTier.open_node(tmp_path / "cache", max_bytes=64 << 20)
    yield opened
    opened.close()


class Actor:
    """``tests/store/shared/actor.py`` in a process of its own, read line by line."""

    started: list[Actor] = []  # every one, for the cleanup after each test

    def __init__(self, *args: object) -> None:
        Actor.started.append(self)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.store.shared.actor", *map(str, args)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )

    def line(self) -> str:
        assert self.process.stdout is not None
        return self.process.stdout.readline().strip()

    def say(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def kill(self) -> None:
        """SIGKILL, at once (no cleanup runs in it), then close the pipes."""
        self.process.kill()
        self.process.communicate(timeout=30)

    def returncode(self) -> int:
        """Wait for it to end by itself; its exit status."""
        self.process.communicate(timeout=60)
        return self.process.returncode

    def finish(self) -> str:
        out, _ = self.process.communicate(timeout=60)
        assert self.process.returncode == 0
        return out.strip()


@pytest.fixture(autouse=True)
def no_actor_left() -> Iterator[None]:
    """A test that fails half way leaves no actor waiting on its stdin."""
    yield
    while Actor.started:
        actor = Actor.started.pop()
        if actor.process.poll() is None:
            actor.kill()
        else:
            actor.process.communicate()


def body_files(bodies: Path) -> list[str]:
    """The names of the files under a tier's bodies/, those being written included."""
    return sorted(path.name for path in bodies.rglob("*") if path.is_file())


def run_actor(*args: object) -> str:
    """Run the actor to its end; its output."""
    return Actor(*args).finish()
