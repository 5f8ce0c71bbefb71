"""An edge worker's command line (proxy/process/worker_args.py): what the node writes is what
``cdn-proxy worker`` reads back, flag for flag."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from proxy.cli import main
from proxy.process.worker_args import WorkerArgs

EVERY_FLAG = WorkerArgs(
    Path("/etc/cdn/node.toml"),
    port=8081,
    fleet_url="unix:///run/cdn/valkey.sock",
    tls_port=8443,
    stdout_fd=7,
    cache_instance="a1b2c3",
)


@pytest.mark.parametrize(
    "args",
    [EVERY_FLAG, WorkerArgs(Path("node.toml"), port=1, fleet_url="valkey://127.0.0.1:1")],
    ids=["every flag", "defaults"],
)
def test_the_cli_reads_back_what_the_node_writes(args: WorkerArgs) -> None:
    argv = args.argv(3)
    assert argv[:4] == [sys.executable, "-m", "proxy", "worker"]
    parsed = main._parser().parse_args(argv[3:])
    assert parsed.run is main._worker and parsed.index == 3
    assert WorkerArgs.parsed(parsed) == args


def test_optional_flags_are_left_out_when_not_given() -> None:
    argv = WorkerArgs(Path("node.toml"), port=1, fleet_url="valkey://127.0.0.1:1").argv(0)
    assert "--tls-port" not in argv and "--cache-instance" not in argv
    assert "--tls-port" in EVERY_FLAG.argv(0) and "--cache-instance" in EVERY_FLAG.argv(0)
