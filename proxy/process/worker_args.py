"""An edge worker's command line (``python -m proxy worker ...``), a record that crosses a
process: the node writes it (proxy/process/node.py ``edge_workers``, through the supervisor)
and ``cdn-proxy worker`` reads it back (proxy/cli/main.py). Light on imports: the CLI builds
its parser from it for every command.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class WorkerArgs:
    """An edge worker's command line, but for its index: written by its node
    (proxy/process/node.py ``edge_workers``) and read back by ``cdn-proxy worker``
    (proxy/cli/main.py), from this one definition so that neither side can miss a flag."""

    config_path: Path
    port: int  # the edge port the node reserved, shared with SO_REUSEPORT
    fleet_url: str
    tls_port: int | None = None  # with edge.tls_listen
    stdout_fd: int = 1  # where access_log = "-" goes: the node's standard output
    cache_instance: str | None = None  # the node's instance id on cache.disk_path

    def argv(self, index: int) -> list[str]:
        """The command line of worker ``index``."""
        line = [sys.executable, "-m", "proxy", "worker", "--config", str(self.config_path)]
        line += ["--index", str(index), "--port", str(self.port), "--fleet-url", self.fleet_url]
        line += ["--stdout-fd", str(self.stdout_fd)]
        if self.tls_port is not None:
            line += ["--tls-port", str(self.tls_port)]
        if self.cache_instance is not None:
            line += ["--cache-instance", self.cache_instance]
        return line

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        """The flags ``argv`` writes, but ``--config`` (every command's)."""
        parser.add_argument("--index", type=int, required=True)
        parser.add_argument("--port", type=int, required=True)
        parser.add_argument("--fleet-url", required=True)
        parser.add_argument("--tls-port", type=int, default=None)
        parser.add_argument("--stdout-fd", type=int, default=1)
        parser.add_argument("--cache-instance", default=None)

    @classmethod
    def parsed(cls, args: argparse.Namespace) -> WorkerArgs:
        """What ``add_arguments`` read (the index is ``args.index``)."""
        return cls(
            args.config, args.port, args.fleet_url, args.tls_port, args.stdout_fd,
            args.cache_instance,
        )  # fmt: skip
