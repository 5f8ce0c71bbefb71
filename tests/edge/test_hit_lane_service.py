"""The hit lane (decision 0050) as the rest of the edge sees it: its hits are counted in
/metrics and logged as any fast hit is, over TLS behind the Host-vs-SNI check, and the
connection's timers (keep-alive, the request head's) hold after a lane hit as after any."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import aiohttp
import pytest

from proxy.process.service import Service, running
from tests.conftest import Origin
from tests.edge.access_support import lines_of
from tests.edge.lane_support import PRIMED, Twins, exchange, site, twins_of
from tests.edge.tls_support import Certificates, pair_keys, tls_config

pytestmark = pytest.mark.slow  # two whole edges per test

HIT = b"GET /hit HTTP/1.1\r\nHost: example.com\r\n\r\n"
HEAD = b"HEAD /hit HTTP/1.1\r\nHost: example.com\r\n\r\n"
COUNTED = re.compile(
    r"^cdn_proxy_(requests_total|responses_total|response_bytes_total"
    r"|request_duration_seconds_count)\{.*\} .*$",
    re.MULTILINE,
)


async def counted(service: Service) -> list[str]:
    async with (
        aiohttp.ClientSession() as client,
        client.get(service.api_url + "/metrics") as response,
    ):
        return [match.group(0) for match in COUNTED.finditer(await response.text())]


async def test_lane_hits_are_counted_as_any_hit(twins: Twins) -> None:
    on, _ = await twins.compare(HIT * 3)
    assert on.lane_hits == 3
    on_lines, off_lines = await counted(twins.on), await counted(twins.off)
    assert 'cdn_proxy_requests_total{cache_status="hit",domain="example.com"} 3.0' in on_lines
    assert on_lines == off_lines


async def test_lane_heads_are_counted_as_the_full_paths_are(twins: Twins) -> None:
    """A HEAD the lane answers (decision 0055) counts as the full path's HEAD hit does."""
    on, _ = await twins.compare(HEAD * 2 + HIT)
    assert on.lane_hits == 3
    on_lines, off_lines = await counted(twins.on), await counted(twins.off)
    assert 'cdn_proxy_requests_total{cache_status="hit",domain="example.com"} 3.0' in on_lines
    assert on_lines == off_lines


LANE_ANSWERS = re.compile(r"^cdn_proxy_hit_lane_answers_total (\S+)$", re.MULTILINE)


async def lane_answers(service: Service) -> float:
    """``cdn_proxy_hit_lane_answers_total`` in the service's /metrics (there from the start)."""
    async with (
        aiohttp.ClientSession() as client,
        client.get(service.api_url + "/metrics") as response,
    ):
        found = LANE_ANSWERS.search(await response.text())
    assert found is not None
    return float(found.group(1))


async def test_metrics_show_the_lanes_answers_from_zero(twins: Twins) -> None:
    before = await lane_answers(twins.on)
    assert before == twins.on.edge.lane_answered  # the primes' answers: none from the lane
    on, _ = await twins.compare(HIT * 3)
    assert on.lane_hits == 3
    assert await lane_answers(twins.on) == before + 3
    assert await lane_answers(twins.off) == 0.0  # the switch off: shown, at zero


async def test_a_lane_hit_is_logged_as_a_fast_hit_is(tmp_path: Path, origin: Origin) -> None:
    async with twins_of(tmp_path, origin, logs=True) as twins:
        on, _ = await twins.compare(HIT, end=False)
        assert on.lane_hits == 1
        # The primes' requests (a miss and the END request each), then the hit.
        count = 2 * len(PRIMED) + 1
        logs = [await lines_of(tmp_path / name / "access.log", count) for name in ("on", "off")]
    # Without the time and the seconds taken (origin, total).
    varying = re.compile(r"\[[^]]*\]|( [-0-9.]+)+$")
    on_lines, off_lines = ([varying.sub("", line) for line in lines] for lines in logs)
    assert on_lines == off_lines
    assert '"GET /hit HTTP/1.1" 200' in on_lines[-1]


async def test_a_lane_head_is_logged_as_the_full_paths_is(tmp_path: Path, origin: Origin) -> None:
    async with twins_of(tmp_path, origin, logs=True) as twins:
        on, _ = await twins.compare(HEAD, end=False)
        assert on.lane_hits == 1
        count = 2 * len(PRIMED) + 1
        logs = [await lines_of(tmp_path / name / "access.log", count) for name in ("on", "off")]
    varying = re.compile(r"\[[^]]*\]|( [-0-9.]+)+$")
    on_lines, off_lines = ([varying.sub("", line) for line in lines] for lines in logs)
    assert on_lines == off_lines
    assert '"HEAD /hit HTTP/1.1" 200' in on_lines[-1]


async def after_a_hit(service: Service, then: bytes) -> bytes:
    """A lane hit, then ``then`` on the same connection: what came after the hit's answer,
    until the edge closed the connection."""
    host, _, port = service.edge_url.removeprefix("http://").rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        async with asyncio.timeout(5):  # a bound: the timers are 0.5 s
            writer.write(HIT)
            await reader.readuntil(b"GET /hit")  # its body: the hit is answered
            writer.write(then)
            return await reader.read()
    finally:
        writer.close()


@pytest.mark.parametrize(
    ("timeouts", "then", "expected"),
    [
        ({"keepalive_timeout": 0.5}, b"", b""),  # idle: closed, as after any answer
        ({"header_timeout": 0.5}, b"GET /hit HTTP/1.1\r\nHo", b"HTTP/1.1 408 "),  # slowloris
    ],
    ids=["keep-alive", "head"],
)
async def test_the_connection_timers_hold_after_a_lane_hit(
    tmp_path: Path, origin: Origin, timeouts: dict[str, float], then: bytes, expected: bytes
) -> None:
    async with twins_of(tmp_path, origin, timeouts) as twins:
        before = twins.on.edge.lane_answered
        on = await after_a_hit(twins.on, then)
        assert twins.on.edge.lane_answered == before + 1
        assert on == await after_a_hit(twins.off, then)
    assert on.startswith(expected)


async def test_tls_hits_take_the_lane_behind_the_sni_check(tmp_path: Path, origin: Origin) -> None:
    origin.default = site
    certs = Certificates(tmp_path)
    config = tls_config(tmp_path, origin.url, edge=pair_keys(certs.issue("example.com")))
    async with running(config) as service:
        assert service.tls_url is not None
        host, _, port = service.tls_url.removeprefix("https://").rpartition(":")
        answers = []
        for sni in ("example.com", "example.com", "other.test"):
            context = certs.client()
            context.check_hostname = False
            reader, writer = await asyncio.open_connection(
                host, int(port), ssl=context, server_hostname=sni
            )
            writer.write(HIT)
            async with asyncio.timeout(5):  # a bound
                answers.append(await reader.readuntil(b"\r\n\r\n"))
            writer.close()
        lane = service.edge.lane_answered
    first, hit, misdirected = answers
    assert b"fwd=uri-miss" in first
    assert b"Cache-Status: cdn-proxy; hit\r\n" in hit
    assert misdirected.startswith(b"HTTP/1.1 421 ")
    assert lane == 1  # the second connection's hit: the third's was the full path's 421


async def test_with_the_switch_off_no_request_takes_the_lane(twins: Twins) -> None:
    answer = await exchange(twins.off.edge_url, HIT * 2)
    assert answer.data.count(b"cdn-proxy; hit") == 2
    assert twins.off.edge.lane_answered == 0
