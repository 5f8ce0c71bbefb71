"""What a process's listeners share (proxy/process/listeners.py ``ProcessContext``): one
shutdown when the process gives one, else one of each listener's own, bounded by the edge's
shutdown_timeout (30 s on a node without an [edge])."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from proxy.edge.h2.client_streams import ClientStreams
from proxy.observe.telemetry import Telemetry
from proxy.process.listeners import Draining, ProcessContext, _edge_guard
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


@pytest.mark.parametrize(
    ("workers", "per_node", "share"),
    [(1, 2048, 2048), (3, 2048, 683), (4, 6, 2), (2, 0, 0)],
)
def test_each_worker_takes_its_share_of_the_streams_per_client(
    tmp_path: Path, workers: int, per_node: int, share: int
) -> None:
    """Decision 0060: per node, as origin_requests_per_client; 0 is no limit in each."""
    edge = {"listen": "127.0.0.1:0", "workers": workers, "http2_streams_per_client": per_node}
    guard = _edge_guard(make_config(tmp_path, "http://127.0.0.1:9", edge=edge))
    assert isinstance(guard.streams, ClientStreams)
    assert guard.streams.per_client == share
    assert guard.figures()[-3:] == [0, share, 0]  # open, the cap, refused
    guard.close()
