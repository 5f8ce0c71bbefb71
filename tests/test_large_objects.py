"""Large objects in the shared tier (issue 23 §6, decision 0039), through real processes.

``cdn-proxy serve`` with a disk tier in front of a real origin that generates a deterministic
body as it sends it (benchmarks/large_objects.py's ``LargeBody``: never held whole, neither
there nor here: every client hashes what it reads, piece by piece). What is checked:

- a 256 MiB object is byte-exact on the miss that stores it (streamed to the first client),
  on hits, after a restart (a process that has not checked the file yet) and on Ranges (first
  bytes, middle, suffix, two ranges that coalesce, two that do not), with the proxy's peak
  resident memory bounded far below the object's size;
- the first client gets the body while the origin is still sending it, and requests
  collapsed onto that fill make no origin request of their own;
- a body file corrupted on disk is never sent whole: the connection is cut, and the next
  request is a miss that stores it again.
"""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from benchmarks.large_objects import LargeBody, fetch, memory
from proxy.config.model import load_config
from tests.conftest import Origin
from tests.edge.tls_support import Certificates
from tests.nodes import Node, write_config
from tests.polling import until

MIB = 1 << 20
HOST = {"Host": "example.com"}
STORED = "cdn-proxy; fwd=uri-miss; stored"
DISK_HIT = 'cdn-proxy; hit; detail="disk"'
COLLAPSED = "cdn-proxy; fwd=uri-miss; collapsed"
# The proxy's peak resident memory above its idle size while it fills and serves a 256 MiB
# object, hits, ranges and all. Measured: +17 MiB (benchmarks/README.md); the bound leaves
# room for a loaded machine, and is far below the object.
RSS_BOUND = 120 * MIB
# The shared tier's size: more than ten times the largest object here, so that an eviction
# policy that keeps a very large object only from its second fill (S3-FIFO keeps none of 10%
# of the tier or more on its first) keeps each of these on its first.
DISK = "4GiB"


def large_config(
    tmp_path: Path,
    origin: Origin,
    *,
    max_object: str = "512MiB",
    workers: int = 1,
    edge: str = "",
) -> Path:
    return write_config(
        tmp_path,
        origin.url,
        workers=workers,
        edge=edge,
        cache=(
            f'disk_path = "{tmp_path / "cache"}"\ndisk_max_bytes = "{DISK}"\n'
            f'max_object_bytes = "{max_object}"'
        ),
    )


def serve_body(origin: Origin, target: str, body: LargeBody, *, chunked: bool = False) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"Cache-Control": "max-age=600", "ETag": f'"{body.seed}"'}
        )
        if not chunked:
            response.content_length = body.size
        await response.prepare(request)
        for chunk in body.chunks():
            await response.write(chunk)
        await response.write_eof()
        return response

    origin.route(target, handler)


def established(port: int) -> int:
    """TCP connections accepted on ``port`` of 127.0.0.1 and open (/proc/net/tcp)."""
    lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    local = f"0100007F:{port:04X}"
    return sum(1 for line in lines if line.split()[1] == local and line.split()[3] == "01")


async def start(nodes: list[Node], config: Path) -> tuple[Node, int]:
    """A node and its resident size at idle."""
    node = await Node.start(config)
    nodes.append(node)
    return node, memory(node.process.pid)["VmRSS"]


async def ranged(node: Node, target: str, ranges: str) -> tuple[int, str, str, int, str]:
    """status, Cache-Status, SHA-256 and length of the body, Content-Range."""
    connector = aiohttp.TCPConnector(force_close=True)
    async with (
        aiohttp.ClientSession(connector=connector) as client,
        client.get(node.edge + target, headers={**HOST, "Range": ranges}) as response,
    ):
        digest = hashlib.sha256()
        length = 0
        async for chunk in response.content.iter_any():
            digest.update(chunk)
            length += len(chunk)
        content_range = response.headers.get("Content-Range", "")
        status = response.headers.get("Cache-Status", "")
        return response.status, status, digest.hexdigest(), length, content_range


@pytest.mark.slow
async def test_a_256_mib_object_is_byte_exact_on_a_miss_hits_and_ranges_in_bounded_memory(
    tmp_path: Path, origin: Origin, nodes: list[Node]
) -> None:
    body = LargeBody(256 * MIB, seed=7)
    whole = body.sha256()
    serve_body(origin, "/big", body)
    config = large_config(tmp_path, origin)
    node, idle = await start(nodes, config)

    assert await fetch(node.edge, "/big") == (200, STORED, whole, body.size)
    for _ in range(2):  # the fill's own process: sent by sendfile from the first hit
        assert await fetch(node.edge, "/big") == (200, DISK_HIT, whole, body.size)
    middle = (100_000_003, 100_999_999)
    cases = {
        "bytes=0-99": (206, body.sha256(0, 100), 100, f"bytes 0-99/{body.size}"),
        f"bytes={middle[0]}-{middle[1]}": (
            206,
            body.sha256(middle[0], middle[1] + 1),
            middle[1] + 1 - middle[0],
            f"bytes {middle[0]}-{middle[1]}/{body.size}",
        ),
        "bytes=-1000": (
            206,
            body.sha256(body.size - 1000),
            1000,
            f"bytes {body.size - 1000}-{body.size - 1}/{body.size}",
        ),
        # Two ranges that coalesce are one part; two that do not are the whole 200
        # (multipart/byteranges is not sent: decision 0021).
        "bytes=0-9,5-99": (206, body.sha256(0, 100), 100, f"bytes 0-99/{body.size}"),
        "bytes=0-9,1000-1009": (200, whole, body.size, ""),
    }
    for ranges, (status, digest, length, content_range) in cases.items():
        assert await ranged(node, "/big", ranges) == (
            status,
            DISK_HIT,
            digest,
            length,
            content_range,
        ), ranges
    assert origin.count("/big") == 1
    peak = memory(node.process.pid)["VmHWM"]
    assert peak - idle < RSS_BOUND, (idle // MIB, peak // MIB)

    # A new process has not checked the file: its first hit reads and checks every chunk,
    # the next is sent by sendfile; both whole, and still no origin request.
    node.process.terminate()
    assert await node.process.wait() == 0
    node, idle = await start(nodes, config)
    for _ in range(2):
        assert await fetch(node.edge, "/big") == (200, DISK_HIT, whole, body.size)
    status, digest, length, content_range = cases["bytes=-1000"]
    assert await ranged(node, "/big", "bytes=-1000") == (
        status,
        DISK_HIT,
        digest,
        length,
        content_range,
    )
    assert origin.count("/big") == 1
    peak = memory(node.process.pid)["VmHWM"]
    assert peak - idle < RSS_BOUND, (idle // MIB, peak // MIB)


@pytest.mark.slow
async def test_the_first_client_is_streamed_the_body_while_the_origin_sends_it_and_others_wait(
    tmp_path: Path, origin: Origin, nodes: list[Node]
) -> None:
    body = LargeBody(24 * MIB, seed=3)
    half = 12 * MIB
    more = asyncio.Event()

    async def gated(request: web.Request) -> web.StreamResponse:
        # Chunked (no Content-Length): half the body, then the rest only once the test has
        # seen the first client receive that half through the proxy.
        response = web.StreamResponse(headers={"Cache-Control": "max-age=600"})
        await response.prepare(request)
        for chunk in body.chunks(0, half):
            await response.write(chunk)
        await more.wait()
        for chunk in body.chunks(half):
            await response.write(chunk)
        await response.write_eof()
        return response

    origin.route("/gated", gated)
    node, _ = await start(nodes, large_config(tmp_path, origin))
    connector = aiohttp.TCPConnector(force_close=True)
    async with (
        aiohttp.ClientSession(connector=connector) as client,
        client.get(node.edge + "/gated", headers=HOST) as first,
    ):
        # Chunked: whether it fits max_object_bytes is not known when the head is sent.
        assert (first.status, first.headers["Cache-Status"]) == (200, "cdn-proxy; fwd=uri-miss")
        digest = hashlib.sha256()
        received = 0
        async with asyncio.timeout(30):  # a proxy that buffered the body would never answer
            while received < half - MIB:
                chunk = await first.content.readany()
                assert chunk
                digest.update(chunk)
                received += len(chunk)
        others = [asyncio.create_task(fetch(node.edge, "/gated")) for _ in range(4)]
        # Released once their connections are open (the proxy's side, in /proc): they join
        # the fill under way, or come after it as hits; either way no origin request.
        port = int(node.edge.rsplit(":", 1)[1])
        await until(lambda: established(port) >= 1 + len(others))
        more.set()
        async for chunk in first.content.iter_any():
            digest.update(chunk)
            received += len(chunk)
    assert (received, digest.hexdigest()) == (body.size, body.sha256())
    for status, cache_status, digest_of, length in await asyncio.gather(*others):
        assert (status, digest_of, length) == (200, body.sha256(), body.size)
        assert cache_status in (COLLAPSED, DISK_HIT)
    assert origin.count("/gated") == 1
    assert await fetch(node.edge, "/gated") == (200, DISK_HIT, body.sha256(), body.size)


@pytest.mark.slow
async def test_the_fill_goes_on_when_its_first_client_leaves(
    tmp_path: Path, origin: Origin, nodes: list[Node]
) -> None:
    body = LargeBody(24 * MIB, seed=17)
    more = asyncio.Event()

    async def gated(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Cache-Control": "max-age=600"})
        response.content_length = body.size
        await response.prepare(request)
        for chunk in body.chunks(0, 4 * MIB):
            await response.write(chunk)
        await more.wait()  # the rest once the first client has gone
        for chunk in body.chunks(4 * MIB):
            await response.write(chunk)
        await response.write_eof()
        return response

    origin.route("/left", gated)
    node, _ = await start(nodes, large_config(tmp_path, origin))
    port = int(node.edge.rsplit(":", 1)[1])
    connector = aiohttp.TCPConnector(force_close=True)
    async with (
        aiohttp.ClientSession(connector=connector) as client,
        client.get(node.edge + "/left", headers=HOST) as first,
    ):
        assert (first.status, first.headers["Cache-Status"]) == (200, STORED)
        assert await first.content.readexactly(MIB)
    await until(lambda: established(port) == 0)  # the proxy saw it leave
    more.set()
    status, cache_status, digest, length = await fetch(node.edge, "/left")
    assert (status, digest, length) == (200, body.sha256(), body.size)
    assert cache_status in (COLLAPSED, DISK_HIT)
    assert origin.count("/left") == 1


@pytest.mark.slow
async def test_concurrent_large_misses_each_hold_pieces_not_a_memory_share(
    tmp_path: Path, origin: Origin, nodes: list[Node]
) -> None:
    # A 256 MiB memory tier: bodies up to 32 MiB are read whole. Larger ones, by their
    # Content-Length, stream from their first byte: twelve at once hold pieces, not 12 x 32 MiB.
    bodies = {f"/m{i}": LargeBody(48 * MIB, seed=100 + i) for i in range(12)}
    for target, body in bodies.items():
        serve_body(origin, target, body)
    config = large_config(tmp_path, origin)
    config.write_text(config.read_text().replace('max_bytes = "8MiB"', 'max_bytes = "256MiB"'))
    node, idle = await start(nodes, config)
    answers = await asyncio.gather(*(fetch(node.edge, target) for target in bodies))
    for (target, body), answer in zip(bodies.items(), answers, strict=True):
        assert answer == (200, STORED, body.sha256(), body.size), target
    peak = memory(node.process.pid)["VmHWM"]
    assert peak - idle < RSS_BOUND, (idle // MIB, peak // MIB)


@pytest.mark.slow
async def test_with_two_workers_a_large_object_is_filled_once_and_sent_by_both(
    tmp_path: Path, origin: Origin, nodes: list[Node]
) -> None:
    body = LargeBody(32 * MIB, seed=11)
    serve_body(origin, "/w", body)
    node, _ = await start(nodes, large_config(tmp_path, origin, workers=2))
    assert await fetch(node.edge, "/w") == (200, STORED, body.sha256(), body.size)
    statuses = set()
    for _ in range(8):  # fresh connections: the kernel spreads them over both workers
        status, cache_status, digest, length = await fetch(node.edge, "/w")
        assert (status, digest, length) == (200, body.sha256(), body.size)
        statuses.add(cache_status)
    assert statuses == {DISK_HIT}
    assert origin.count("/w") == 1


async def curl_h2(url: str, out: Path, *extra: str) -> str:
    """GET over HTTP/2 with prior knowledge (h2c) with curl: "version status" of its answer,
    its body written to ``out``."""
    process = await asyncio.create_subprocess_exec(
        "curl",
        "-s",
        "--http2-prior-knowledge",
        "-H",
        "Host: example.com",
        "-o",
        str(out),
        "-w",
        "%{http_version} %{http_code}",
        *extra,
        url,
        stdout=asyncio.subprocess.PIPE,
    )
    written, _ = await process.communicate()
    assert process.returncode == 0
    return written.decode()


def file_sha256(path: Path) -> tuple[str, int]:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while piece := file.read(MIB):
            digest.update(piece)
    return digest.hexdigest(), path.stat().st_size


@pytest.mark.slow
async def test_hits_over_http2_and_head_are_sent_from_the_file_checked(
    tmp_path: Path, origin: Origin, nodes: list[Node]
) -> None:
    body = LargeBody(16 * MIB, seed=13)
    serve_body(origin, "/h2", body)
    node, _ = await start(nodes, large_config(tmp_path, origin, edge="h2c = true"))
    assert await fetch(node.edge, "/h2") == (200, STORED, body.sha256(), body.size)
    out = tmp_path / "h2.out"
    # An HTTP/2 stream never takes sendfile: every chunk is read and checked, then framed.
    assert await curl_h2(node.edge + "/h2", out) == "2 200"
    assert file_sha256(out) == (body.sha256(), body.size)
    assert await curl_h2(node.edge + "/h2", out, "-r", "1000000-1999999") == "2 206"
    assert file_sha256(out) == (body.sha256(1_000_000, 2_000_000), 1_000_000)
    connector = aiohttp.TCPConnector(force_close=True)
    async with (
        aiohttp.ClientSession(connector=connector) as client,
        client.head(node.edge + "/h2", headers=HOST) as head,
    ):
        assert (head.status, head.headers["Content-Length"]) == (200, str(body.size))
        assert head.headers["Cache-Status"] == DISK_HIT
        assert await head.read() == b""
    assert origin.count("/h2") == 1


@pytest.mark.slow
async def test_a_stale_large_object_refreshed_by_a_304_keeps_its_body_file(
    tmp_path: Path, origin: Origin, nodes: list[Node]
) -> None:
    body = LargeBody(16 * MIB, seed=19)
    sent = []

    async def validated(request: web.Request) -> web.StreamResponse:
        headers = {"Cache-Control": "max-age=0, must-revalidate", "ETag": '"v1"'}
        if request.headers.get("If-None-Match") == '"v1"':
            sent.append(304)
            return web.Response(status=304, headers={**headers, "X-Refresh": str(len(sent))})
        sent.append(200)
        response = web.StreamResponse(headers=headers)
        response.content_length = body.size
        await response.prepare(request)
        for chunk in body.chunks():
            await response.write(chunk)
        await response.write_eof()
        return response

    origin.route("/v", validated)
    node, _ = await start(nodes, large_config(tmp_path, origin))
    assert await fetch(node.edge, "/v") == (200, STORED, body.sha256(), body.size)
    bodies = tmp_path / "cache" / "bodies"
    (first,) = bodies.glob("*.body")
    inode = first.stat().st_ino
    for refresh in (1, 2):
        status, cache_status, digest, length = await fetch(node.edge, "/v")
        assert (status, digest, length) == (200, body.sha256(), body.size)
        assert cache_status == "cdn-proxy; fwd=stale; stored"
        assert sent == [200] + [304] * refresh  # never the body again
        # The refreshed entry took the same file (a hard link under its new name).
        (stored,) = bodies.glob("*.body")
        assert stored != first and stored.stat().st_ino == inode
        first = stored
    seen = [s for s in origin.seen if s.target == "/v"]
    assert seen[-1].headers.get("If-None-Match") == '"v1"'


@pytest.mark.slow
async def test_clients_leaving_in_the_middle_of_hits_leave_the_node_serving(
    tmp_path: Path, origin: Origin, nodes: list[Node]
) -> None:
    body = LargeBody(64 * MIB, seed=23)
    serve_body(origin, "/gone", body)
    config = large_config(tmp_path, origin)
    log = tmp_path / "node.log"
    for _restart in range(2):  # sent by sendfile, then by checked reads in a new process
        node = await Node.start(config, log=log)
        nodes.append(node)
        for _ in range(3):
            async with (
                aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as client,
                client.get(node.edge + "/gone", headers=HOST) as response,
            ):
                assert response.status == 200
                assert await response.content.readexactly(MIB)
            # closed with most of the body unread
        assert (await fetch(node.edge, "/gone"))[2:] == (body.sha256(), body.size)
        node.process.terminate()
        assert await node.process.wait() == 0
    assert origin.count("/gone") == 1
    assert "Traceback" not in log.read_text()


@pytest.mark.slow
async def test_a_range_from_zero_that_misses_is_the_whole_200_streamed_and_stored(
    tmp_path: Path, origin: Origin, nodes: list[Node]
) -> None:
    body = LargeBody(16 * MIB, seed=29)
    serve_body(origin, "/r", body)
    node, _ = await start(nodes, large_config(tmp_path, origin))
    # RFC 9110 §14.2: a server may ignore Range; the fill streams the whole object.
    assert await ranged(node, "/r", "bytes=0-") == (200, STORED, body.sha256(), body.size, "")
    assert "Range" not in origin.seen[-1].headers  # the origin was asked for all of it
    assert await ranged(node, "/r", "bytes=0-") == (
        206,
        DISK_HIT,
        body.sha256(),
        body.size,
        f"bytes 0-{body.size - 1}/{body.size}",
    )
    assert origin.count("/r") == 1


@pytest.mark.slow
async def test_large_answers_that_are_not_stored_are_relayed_without_being_held_whole(
    tmp_path: Path, origin: Origin, nodes: list[Node]
) -> None:
    body = LargeBody(128 * MIB, seed=31)

    async def private(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Cache-Control": "private"})
        response.content_length = body.size
        await response.prepare(request)
        for chunk in body.chunks():
            await response.write(chunk)
        await response.write_eof()
        return response

    origin.route("/private", private)
    node, idle = await start(nodes, large_config(tmp_path, origin))
    # Not storable (a fill passes it on), and a POST (the forwarded path): with
    # max_object_bytes at 512 MiB, neither is read whole before it is sent.
    for method in ("GET", "POST"):
        async with (
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as client,
            client.request(method, node.edge + "/private", headers=HOST) as response,
        ):
            assert response.status == 200
            digest = hashlib.sha256()
            async for chunk in response.content.iter_any():
                digest.update(chunk)
            assert digest.hexdigest() == body.sha256()
    assert origin.count("/private") == 2
    peak = memory(node.process.pid)["VmHWM"]
    assert peak - idle < 64 * MIB, (idle // MIB, peak // MIB)


@pytest.mark.slow
async def test_hits_over_tls_never_take_sendfile_and_are_byte_exact(
    tmp_path: Path, origin: Origin, nodes: list[Node]
) -> None:
    certs = Certificates(tmp_path)
    pair = certs.issue("example.com")
    body = LargeBody(16 * MIB, seed=37)
    serve_body(origin, "/tls", body)
    config = large_config(tmp_path, origin, edge='tls_listen = "127.0.0.1:0"')
    with config.open("a") as file:  # the domain's certificate
        file.write(f'tls_cert = "{pair.cert}"\ntls_key = "{pair.key}"\n')
    node = await Node.start(config, roles=3)
    nodes.append(node)
    url = node.addresses["edge-tls"] + "/tls"
    context = certs.client()
    expected = [(200, STORED), (200, DISK_HIT), (200, DISK_HIT)]
    for status, cache_status in expected:  # the fill's own process: the file is verified
        async with (
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as client,
            client.get(url, headers=HOST, ssl=context, server_hostname="example.com") as response,
        ):
            digest = hashlib.sha256()
            async for chunk in response.content.iter_any():
                digest.update(chunk)
            assert (response.status, response.headers["Cache-Status"]) == (status, cache_status)
            assert digest.hexdigest() == body.sha256()
    assert origin.count("/tls") == 1


@pytest.mark.slow
async def test_a_body_file_gone_from_disk_is_a_cut_connection_then_a_miss(
    tmp_path: Path, origin: Origin, nodes: list[Node]
) -> None:
    body = LargeBody(16 * MIB, seed=41)
    serve_body(origin, "/lost", body)
    node, _ = await start(nodes, large_config(tmp_path, origin))
    assert await fetch(node.edge, "/lost") == (200, STORED, body.sha256(), body.size)
    assert await fetch(node.edge, "/lost") == (200, DISK_HIT, body.sha256(), body.size)
    (stored,) = (tmp_path / "cache" / "bodies").glob("*.body")
    stored.unlink()  # its record is still there; the file, checked by this process, is not
    # On a socket of its own (aiohttp's client would retry on its own): the connection is
    # closed with no answer, since nothing was sent when the file was found missing.
    host, port = node.edge.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(b"GET /lost HTTP/1.1\r\nHost: example.com\r\n\r\n")
    assert await reader.read() == b""
    writer.close()
    assert await fetch(node.edge, "/lost") == (200, STORED, body.sha256(), body.size)
    assert origin.count("/lost") == 2


@pytest.mark.slow
async def test_a_corrupted_body_file_is_never_sent_whole_and_is_filled_again(
    tmp_path: Path, origin: Origin, nodes: list[Node]
) -> None:
    body = LargeBody(16 * MIB, seed=5)
    serve_body(origin, "/c", body)
    node, _ = await start(nodes, large_config(tmp_path, origin))
    assert await fetch(node.edge, "/c") == (200, STORED, body.sha256(), body.size)
    (stored,) = (tmp_path / "cache" / "bodies").glob("*.body")
    with stored.open("r+b") as file:  # one byte of a chunk in the middle, flipped in place
        file.seek(10 * MIB + 5)
        byte = file.read(1)
        file.seek(10 * MIB + 5)
        file.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(aiohttp.ClientPayloadError):
        await fetch(node.edge, "/c")  # cut short before the bad chunk, never ended cleanly
    assert origin.count("/c") == 1
    assert await fetch(node.edge, "/c") == (200, STORED, body.sha256(), body.size)
    assert origin.count("/c") == 2
    assert await fetch(node.edge, "/c") == (200, DISK_HIT, body.sha256(), body.size)


@pytest.mark.slow
async def test_a_chunked_body_past_max_object_bytes_is_relayed_whole_and_not_stored(
    tmp_path: Path, origin: Origin, nodes: list[Node]
) -> None:
    body = LargeBody(6 * MIB, seed=9)
    serve_body(origin, "/over", body, chunked=True)
    node, _ = await start(nodes, large_config(tmp_path, origin, max_object="4MiB"))
    for count in (1, 2):
        status, cache_status, digest, length = await fetch(node.edge, "/over")
        assert (status, digest, length) == (200, body.sha256(), body.size)
        assert "stored" not in cache_status
        assert origin.count("/over") == count
    assert not list((tmp_path / "cache" / "bodies").glob("*.body"))


@pytest.mark.slow
def test_max_object_bytes_may_reach_a_gibibyte_with_a_disk_tier_only(tmp_path: Path) -> None:
    config = write_config(
        tmp_path,
        "http://127.0.0.1:9",
        cache=f'disk_path = "{tmp_path}/c"\ndisk_max_bytes = "2GiB"\nmax_object_bytes = "1GiB"',
    )
    loaded = load_config(config).cache
    assert loaded is not None and loaded.max_object_bytes == 1 << 30
