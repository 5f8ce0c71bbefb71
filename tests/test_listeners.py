"""What a process's listeners share (proxy/process/listeners.py ``ProcessContext``): one
shutdown when the process gives one, else one of each listener's own, bounded by the edge's
shutdown_timeout (30 s on a node without an [edge])."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from proxy.observe.telemetry import Telemetry
from proxy.process.listeners import Draining, ProcessContext
from proxy.store.memory import MemoryStore
from tests.conftest import make_config


def test_a_process_shutdown_is_bounded_by_edge_shutdown_timeout_else_30_seconds(
    tmp_path: Path,
) -> None:
    config = make_config(
        tmp_path, "http://127.0.0.1:9", edge={"listen": "127.0.0.1:0", "shutdown_timeout": 7}
    )
    assert Draining.of(config).timeout == 7
    assert Draining.of(dataclasses.replace(config, edge=None)).timeout == 30.0


@pytest.mark.slow
def test_listeners_join_the_process_shutdown_or_each_make_their_own(tmp_path: Path) -> None:
    config = make_config(
        tmp_path, "http://127.0.0.1:9", edge={"listen": "127.0.0.1:0", "shutdown_timeout": 7}
    )
    telemetry = Telemetry(store=MemoryStore(max_bytes=1 << 20), domains=["example.com"])
    own = ProcessContext(config, telemetry)
    first, second = own.shutdown(), own.shutdown()
    assert first is not second and first.timeout == second.timeout == 7
    shared = Draining(3)
    process = ProcessContext(config, telemetry, draining=shared)
    assert process.shutdown() is shared and process.shutdown() is shared
