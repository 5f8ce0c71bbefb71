"""The edge's access log (issue 14 §4, decision 0019): one line per response, fast hits, 421
and 400 included, in the combined format or JSON, written off the request's path; reopened on
SIGUSR1 for logrotate, by every worker of a node, which share the file.

Real processes: ``cdn-proxy serve`` in a child with a real origin; the lines are read from the
file it writes."""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from proxy.config.model import Config, load_config
from proxy.core.observe.responses import Responses
from proxy.edge.access_log import EdgeAccess
from proxy.errors import ConfigError
from tests.conftest import Origin
from tests.edge.access_support import get, keep_alive_get, lines_of, node_config, raw
from tests.nodes import Node, cli, start
from tests.polling import until

CACHEABLE = {"Cache-Control": "max-age=600", "Content-Type": "text/plain"}
COMBINED = re.compile(
    r"^(?P<client>\S+) - - \[(?P<time>\d\d/\w{3}/\d{4}:\d\d:\d\d:\d\d \+0000)\] "
    r'"(?P<request>[^"]*)" (?P<status>\d{3}) (?P<bytes>\d+) "(?P<referer>[^"]*)" '
    r'"(?P<agent>[^"]*)" "(?P<host>[^"]*)" (?P<cache>\S+) (?P<origin>\S+) (?P<total>\S+)$'
)


def answer_everything(origin: Origin, body: bytes) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        return web.Response(body=body, headers=CACHEABLE)

    origin.default = handler


def parsed(line: str) -> dict[str, str]:
    match = COMBINED.match(line)
    assert match is not None, line
    return match.groupdict()


@pytest.mark.slow
async def test_every_response_has_its_combined_line(
    tmp_path: Path, origin: Origin, nodes: list[Node]
) -> None:
    origin.reply("/page", b"x" * 1000, headers=CACHEABLE)
    log = tmp_path / "access.log"
    node = await start(nodes, node_config(tmp_path, origin.url, edge='access_log = "access.log"'))
    status, _, _ = await get(
        node.edge + "/page", headers={"Referer": 'http://a/"q"', "User-Agent": "test/1"}
    )
    assert status == 200
    hits = await keep_alive_get(node.edge, "/page", 2)  # the fast path
    status, _, _ = await get(node.edge + "/x", host="elsewhere.example")
    assert status == 421
    bad = await raw(node.edge, b"GET /\x01 HTTP/1.1\r\nHost: example.com\r\n\r\n")
    assert bad.startswith(b"HTTP/1.0 400")  # aiohttp answers a request it cannot parse so

    lines = [parsed(line) for line in await lines_of(log, 5)]
    miss, hit, hit2, misdirected, malformed = lines
    assert miss["client"] == "127.0.0.1"
    assert miss["request"] == "GET /page HTTP/1.1"
    assert (miss["status"], miss["cache"], miss["host"]) == ("200", "MISS", "example.com")
    assert miss["referer"] == r"http://a/\x22q\x22"  # escaped as nginx does
    assert miss["agent"] == "test/1"
    assert float(miss["origin"]) > 0
    assert float(miss["total"]) >= float(miss["origin"])
    # Timed with perf_counter, not the loop's clock (whole milliseconds under uvloop): the
    # three totals are all whole milliseconds once in a billion runs.
    assert any(round(float(line["total"]) * 1e6) % 1000 for line in (miss, hit, hit2)), lines
    for line, answer in ((hit, hits[0]), (hit2, hits[1])):
        assert (line["status"], line["cache"], line["origin"]) == ("200", "HIT", "-")
        assert int(line["bytes"]) == len(answer)  # head and body, as sent
        assert line["referer"] == line["agent"] == "-"
    assert (misdirected["status"], misdirected["cache"]) == ("421", "-")
    assert misdirected["host"] == "elsewhere.example"
    assert malformed["status"] == "400"


@pytest.mark.slow
async def test_json_lines_with_the_forwarded_client(
    tmp_path: Path, origin: Origin, nodes: list[Node]
) -> None:
    answer_everything(origin, b"json")
    log = tmp_path / "logs" / "edge.json"
    log.parent.mkdir()
    config = node_config(
        tmp_path,
        origin.url,
        edge='access_log = "logs/edge.json"\naccess_log_format = "json"\n'
        'trusted_proxies = ["127.0.0.1/32"]',
    )
    node = await start(nodes, config)
    for _ in range(2):
        status, _, _ = await get(node.edge + "/j?a=1", headers={"X-Forwarded-For": "203.0.113.5"})
        assert status == 200
    first, second = (json.loads(line) for line in await lines_of(log, 2))
    assert first["client"] == second["client"] == "203.0.113.5"
    assert first["target"] == "/j?a=1"
    assert (first["method"], first["host"], first["protocol"]) == ("GET", "example.com", "HTTP/1.1")
    assert (first["status"], first["cache"], second["cache"]) == (200, "MISS", "HIT")
    assert first["origin_seconds"] > 0 and second["origin_seconds"] is None
    assert first["bytes_sent"] > 4 and first["total_seconds"] > 0
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", first["time"])


@pytest.mark.slow
async def test_sigusr1_reopens_the_file(tmp_path: Path, origin: Origin, nodes: list[Node]) -> None:
    """logrotate: the file is renamed, the process told; new lines go to a new file."""
    answer_everything(origin, b"r")
    log = tmp_path / "access.log"
    node = await start(nodes, node_config(tmp_path, origin.url, edge='access_log = "access.log"'))
    await get(node.edge + "/r")
    await lines_of(log, 1)
    rotated = tmp_path / "access.log.1"
    log.rename(rotated)
    await get(node.edge + "/r?before-signal")  # still to the open (renamed) file
    await lines_of(rotated, 2)
    node.process.send_signal(signal.SIGUSR1)
    await until(log.exists, within=30.0, every=0.05)  # reopened: created again
    await get(node.edge + "/r?after-signal")
    assert "after-signal" in (await lines_of(log, 1))[0]
    assert len(rotated.read_text().splitlines()) == 2


@pytest.mark.slow
async def test_workers_share_the_file_and_reopen_it(
    tmp_path: Path, origin: Origin, nodes: list[Node]
) -> None:
    """Two workers append to one file (O_APPEND, whole lines per write); SIGUSR1 to the node
    reaches both."""
    answer_everything(origin, b"w" * 100)
    log = tmp_path / "access.log"
    config = node_config(tmp_path, origin.url, edge='access_log = "access.log"', workers=2)
    node = await start(nodes, config)
    for index in range(60):  # new connections: the kernel spreads them over the workers
        assert (await get(node.edge + f"/w?{index}"))[0] == 200
    lines = await lines_of(log, 60)
    assert len(lines) == 60
    assert sorted(int(parsed(line)["request"].split("?")[1].split()[0]) for line in lines) == list(
        range(60)
    )
    log.rename(tmp_path / "access.log.1")
    os.kill(node.process.pid, signal.SIGUSR1)
    await until(log.exists, within=30.0, every=0.05)
    # Both workers reopened: every new line lands in the new file, whichever worker served it.
    for index in range(40):
        assert (await get(node.edge + f"/w?again-{index}"))[0] == 200
    assert len(await lines_of(log, 40)) == 40
    assert len((tmp_path / "access.log.1").read_text().splitlines()) == 60


@pytest.mark.slow
@pytest.mark.parametrize(
    ("value", "message"),
    [
        ('access_log = "no-such-dir/a.log"', "edge.access_log: cannot open"),
        ("access_log = true", 'edge.access_log: must be "-" (standard output), a file path'),
        ('access_log_format = "common"', 'edge.access_log_format: must be "combined" or "json"'),
    ],
)
async def test_a_bad_log_is_refused_at_start(tmp_path: Path, value: str, message: str) -> None:
    config = node_config(tmp_path, "http://127.0.0.1:9", edge=value)
    status, _, err = await cli("serve", "--config", str(config))
    assert status in (1, 2)
    assert message in err
    assert "Traceback" not in err


def edge_config(tmp_path: Path, edge: str) -> Config:
    return load_config(node_config(tmp_path, "http://127.0.0.1:9", edge=edge))


def log_one(access: EdgeAccess, target: str) -> None:
    """What aiohttp does once a response is sent: call the hook."""
    request = make_mocked_request("GET", target, headers={"Host": "example.com"})
    hook = access.logger_class()(access, "")  # type: ignore[arg-type]
    hook.log(request, web.Response(status=204), 0.001)


async def test_reconfigure_turns_the_log_on_moves_it_and_off(tmp_path: Path) -> None:
    access = EdgeAccess(edge_config(tmp_path, ""), responses=Responses())
    try:
        log_one(access, "/off")
        access.reconfigure(edge_config(tmp_path, 'access_log = "a.log"'))
        log_one(access, "/to-a")
        assert "/to-a" in (await lines_of(tmp_path / "a.log", 1))[0]
        access.reconfigure(
            edge_config(tmp_path, 'access_log = "b.log"\naccess_log_format = "json"')
        )
        log_one(access, "/to-b")
        assert json.loads((await lines_of(tmp_path / "b.log", 1))[0])["target"] == "/to-b"
        access.reconfigure(edge_config(tmp_path, ""))
        log_one(access, "/off-again")
        with pytest.raises(ConfigError, match=r"edge\.access_log: cannot open"):
            access.reconfigure(edge_config(tmp_path, 'access_log = "missing/c.log"'))
        assert access.writer is None  # a refused config changes nothing
    finally:
        await access.close()
    assert len((tmp_path / "a.log").read_text().splitlines()) == 1
    assert len((tmp_path / "b.log").read_text().splitlines()) == 1
    assert access.responses.of("example.com").classes[2] == 4


@pytest.mark.slow
async def test_a_stalled_destination_drops_lines_and_never_blocks(tmp_path: Path) -> None:
    """Standard output is a pipe nobody reads: the writer blocks, the queue fills, the hook
    counts what it cannot queue and returns at once."""
    read_end, write_end = os.pipe()
    access = EdgeAccess(
        edge_config(tmp_path, 'access_log = "-"'), responses=Responses(), stdout=write_end
    )
    assert access.writer is not None
    access.writer.capacity = 100  # QUEUE_LINES in production
    try:
        for index in range(1500):  # more than the pipe (64 KiB: ~650 lines) and the queue hold
            log_one(access, f"/{index}")
        assert access.responses.log_dropped > 0
        assert access.responses.report()["log_lost"] == access.responses.log_dropped
    finally:
        os.close(read_end)  # the blocked write fails (EPIPE): the writer thread can stop
        await access.close()
        os.close(write_end)
