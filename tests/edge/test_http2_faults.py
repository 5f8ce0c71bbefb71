"""A fault of ours that a client's frames run into (issue 30, hole 5; decision 0044): the
connection ends with GOAWAY INTERNAL_ERROR, and the log gets one throttled line, never a
traceback per connection or per request. The fault is injected (a frame reader that raises):
no client input is known to cause one, which is the point of catching what no one foresaw."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from h2.errors import ErrorCodes
from hyperframe.frame import PingFrame

from proxy.edge.h2.events import Event
from proxy.edge.h2.frames import FrameType
from proxy.edge.h2.machine import ServerMachine
from proxy.process.service import Service, running
from tests.conftest import Origin
from tests.edge.h2_support import RawH2
from tests.edge.tls_support import Certificates, pair_keys, tls_config


@pytest.fixture
def certs(tmp_path: Path) -> Certificates:
    return Certificates(tmp_path)


@pytest.fixture
async def service(tmp_path: Path, origin: Origin, certs: Certificates) -> AsyncIterator[Service]:
    config = tls_config(tmp_path, origin.url, edge={**pair_keys(certs.issue("example.com"))})
    async with running(config) as running_service:
        yield running_service


def broken_ping(
    machine: ServerMachine, flags: int, stream_id: int, payload: bytes, events: list[Event]
) -> None:
    raise ValueError("an injected fault")


async def test_a_fault_in_the_frame_machine_is_a_connection_error_with_no_traceback(
    service: Service,
    certs: Certificates,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    caplog.set_level(logging.DEBUG, logger="proxy")
    monkeypatch.setitem(ServerMachine._READERS, FrameType.PING, broken_ping)
    assert service.tls_url is not None
    for _ in range(3):
        client = await RawH2.open(service.tls_url, certs.client())
        client.send_raw(PingFrame(0, opaque_data=b"12345678").serialize())
        await client.until_closed()
        assert client.goaway is not None
        assert client.goaway.error_code == ErrorCodes.INTERNAL_ERROR
        await client.close()
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.exc_info for r in warnings] == [None]  # one line for three, no traceback
    line = warnings[0].getMessage()
    assert "INTERNAL_ERROR: ValueError: an injected fault at " in line
    assert "test_http2_faults.py" in line  # where it was raised
