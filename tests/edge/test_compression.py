"""Compression at the edge, once per object (issue 26 §2, decision 0035), through the edge
with a real origin and real clients: the bytes each client gets on the wire, decoded back
byte for byte; one origin request for every coding; purges; what is never compressed."""

from __future__ import annotations

import asyncio
import gzip
import random
import shutil

import brotli
import pytest
import zstandard
from aiohttp import web

from proxy.core.purge.purges import Purge, purge_request
from tests.conftest import EdgeFactory, EdgeUnderTest, Origin
from tests.polling import until

CURL = shutil.which("curl")  # scripts/test installs it
COMPRESSING = {"name": "example.com", "origin": "", "compress": ["br", "gzip", "zstd"]}


def page(size: int, seed: int = 1) -> bytes:
    """HTML-like text that compresses as pages do (words drawn from a small vocabulary)."""
    rng = random.Random(seed)
    words = [f"w{rng.randrange(4000)}" for _ in range(size // 4)]
    return ("<p>" + " ".join(words) + "</p>\n").encode()[:size]


def decoded(coding: str, body: bytes) -> bytes:
    if coding == "br":
        return bytes(brotli.decompress(body))
    if coding == "gzip":
        return gzip.decompress(body)
    if coding == "zstd":
        return zstandard.ZstdDecompressor().decompressobj().decompress(body)
    return body


@pytest.fixture
async def edge(make_edge: EdgeFactory, origin: Origin) -> EdgeUnderTest:
    return await make_edge(domains=[{**COMPRESSING, "origin": origin.url}])


BODY = page(20_000)
HTML = {"Content-Type": "text/html; charset=utf-8", "Cache-Control": "max-age=60", "ETag": '"v1"'}

CLIENTS = [  # Accept-Encoding as sent, the coding served
    ("gzip, deflate, br, zstd", "br"),
    ("gzip, deflate", "gzip"),
    ("zstd", "zstd"),
    ("identity", "identity"),
    ("deflate", "identity"),
]


async def test_each_client_gets_its_best_coding_from_one_origin_request(
    edge: EdgeUnderTest, origin: Origin
) -> None:
    """Five clients, twice each: one origin request (asking for the first client's coding);
    each gets the best coding it accepts (identity when none), with its own Content-Length,
    a weak ETag for compressed copies, Vary: Accept-Encoding on every answer, and bytes that
    decode to the origin's exactly."""
    origin.reply("/page", BODY, headers=HTML)
    sizes: dict[str, int] = {}
    for round_ in range(2):
        for accept, coding in CLIENTS:
            response, body = await edge.get("/page", headers={"Accept-Encoding": accept})
            assert response.status == 200
            assert response.headers.get("Content-Encoding", "identity") == coding
            assert response.headers["Content-Length"] == str(len(body))
            assert response.headers["Vary"] == "Accept-Encoding"
            assert decoded(coding, body) == BODY
            assert response.headers["ETag"] == ('"v1"' if coding == "identity" else 'W/"v1"')
            assert ("hit" in response.headers["Cache-Status"]) is (round_ + len(sizes) > 0)
            sizes[coding] = len(body)
    assert origin.count("/page") == 1
    assert origin.seen[0].headers["Accept-Encoding"] == "br"
    assert sizes["identity"] == len(BODY)
    assert sizes["br"] < sizes["gzip"] < len(BODY) // 2
    found = await edge.store.lookup("example.com", "/page")
    codings = sorted(v.vary_values for v in found.variants)
    assert codings == [("br",), ("gzip",), ("identity",), ("zstd",)]


async def test_an_identity_client_first_fills_every_coding(
    edge: EdgeUnderTest, origin: Origin
) -> None:
    origin.reply("/page", BODY, headers=HTML)
    response, body = await edge.get("/page", headers={"Accept-Encoding": "identity"})
    assert (body, "Content-Encoding" in response.headers) == (BODY, False)
    response, body = await edge.get("/page", headers={"Accept-Encoding": "br"})
    assert "hit" in response.headers["Cache-Status"]
    assert decoded("br", body) == BODY
    assert origin.count("/page") == 1


async def test_concurrent_clients_of_every_coding_share_one_origin_request(
    edge: EdgeUnderTest, origin: Origin
) -> None:
    """Collapsed requests of other codings are served the copies the leader stored."""
    gate = asyncio.Event()

    async def slow(request: web.Request) -> web.StreamResponse:
        await gate.wait()
        return web.Response(body=BODY, headers=HTML)

    origin.route("/page", slow)
    answers = [
        asyncio.create_task(edge.get("/page", headers={"Accept-Encoding": accept}))
        for accept, _ in CLIENTS
    ]
    flights = edge.edge.flights

    def all_waiting() -> bool:
        flight = flights.get(("example.com", 0, "/page"))
        return flight is not None and flight.waiters == len(CLIENTS) - 1

    await until(all_waiting)
    gate.set()
    for (_, coding), answer in zip(CLIENTS, answers, strict=True):
        response, body = await answer
        assert response.headers.get("Content-Encoding", "identity") == coding
        assert decoded(coding, body) == BODY
    assert origin.count("/page") == 1


@pytest.mark.parametrize(
    "purge",
    [
        purge_request("url", ["/page"]),
        purge_request("prefix", ["/pa"]),
        purge_request("tag", ["t1"]),
        purge_request("all"),
        purge_request("url", ["/page"], soft=True),
    ],
    ids=["url", "prefix", "tag", "all", "soft-url"],
)
async def test_purges_cover_every_coding(edge: EdgeUnderTest, origin: Origin, purge: Purge) -> None:
    """Every coding of a purged object answers the origin's new version, from one more
    origin request; the purge counts the object's stored copies."""
    version = {"body": page(5000, seed=1)}

    async def versioned(request: web.Request) -> web.StreamResponse:
        return web.Response(body=version["body"], headers={**HTML, "Surrogate-Key": "t1"})

    origin.route("/page", versioned)
    for accept, _ in CLIENTS:
        await edge.get("/page", headers={"Accept-Encoding": accept})
    assert origin.count("/page") == 1
    version["body"] = page(5000, seed=2)
    await edge.store.purge("example.com", purge)
    for accept, coding in CLIENTS:
        _, body = await edge.get("/page", headers={"Accept-Encoding": accept})
        assert decoded(coding, body) == version["body"], coding
    assert origin.count("/page") == 2
    if purge.soft:  # revalidated: the origin's validator is the same, so a 304 was possible
        assert "If-None-Match" in origin.seen[1].headers


@pytest.mark.parametrize(
    ("headers", "length"),
    [
        ({"Cache-Control": "max-age=60, no-transform"}, 5000),  # RFC 9111 §5.2.2.6
        ({"Cache-Control": "max-age=60", "Content-Encoding": "gzip"}, 5000),  # already encoded
        ({"Cache-Control": "max-age=60"}, 255),  # below compress_min_bytes
        ({"Cache-Control": "max-age=60", "Content-Type": "image/png"}, 5000),  # not listed
    ],
    ids=["no-transform", "encoded", "small", "png"],
)
async def test_what_is_never_compressed_is_passed_as_sent(
    edge: EdgeUnderTest, origin: Origin, headers: dict[str, str], length: int
) -> None:
    sent = page(length)
    origin.reply("/thing", sent, headers={"Content-Type": "text/plain", **headers})
    for _ in range(2):
        response, body = await edge.get("/thing", headers={"Accept-Encoding": "br, gzip"})
        assert body == sent
        assert response.headers.get("Content-Encoding") == headers.get("Content-Encoding")
        assert "Vary" not in response.headers
    assert origin.count("/thing") == 1  # stored once, served to every client as it is


async def test_a_range_applies_to_the_coding_served(edge: EdgeUnderTest, origin: Origin) -> None:
    """RFC 9110 §14: the range is of the representation sent, here the br bytes."""
    origin.reply("/page", BODY, headers=HTML)
    _, whole = await edge.get("/page", headers={"Accept-Encoding": "br"})
    response, part = await edge.get(
        "/page", headers={"Accept-Encoding": "br", "Range": "bytes=10-99"}
    )
    assert response.status == 206
    assert response.headers["Content-Encoding"] == "br"
    assert response.headers["Content-Range"] == f"bytes 10-99/{len(whole)}"
    assert part == whole[10:100]
    response, part = await edge.get(
        "/page", headers={"Accept-Encoding": "identity", "Range": "bytes=10-99"}
    )
    assert (response.status, part) == (206, BODY[10:100])
    assert "Content-Encoding" not in response.headers
    assert origin.count("/page") == 1


async def test_a_range_answer_from_the_origin_is_not_compressed(
    edge: EdgeUnderTest, origin: Origin
) -> None:
    origin.reply(
        "/part",
        BODY[:1000],
        status=206,
        headers={**HTML, "Content-Range": f"bytes 0-999/{len(BODY)}"},
    )
    response, body = await edge.get("/part", headers={"Accept-Encoding": "br"})
    assert (response.status, body) == (206, BODY[:1000])
    assert "Content-Encoding" not in response.headers


async def test_conditional_requests_match_each_copy(edge: EdgeUnderTest, origin: Origin) -> None:
    """A client revalidating its br copy with the weak ETag gets a 304 that says Vary."""
    origin.reply("/page", BODY, headers=HTML)
    await edge.get("/page", headers={"Accept-Encoding": "br"})
    response, body = await edge.get(
        "/page", headers={"Accept-Encoding": "br", "If-None-Match": 'W/"v1"'}
    )
    assert (response.status, body) == (304, b"")
    assert response.headers["Vary"] == "Accept-Encoding"
    assert response.headers["ETag"] == 'W/"v1"'


@pytest.mark.slow
async def test_a_large_body_does_not_block_the_loop_nor_its_first_client(
    make_edge: EdgeFactory, origin: Origin
) -> None:
    """A 4 MiB body (decision 0046): its first client gets it as sent, without waiting for
    the copies; they are made in the compression thread while other requests are answered,
    then stored, and a br request hits its copy (each br request before it was a miss)."""
    compressing = {**COMPRESSING, "origin": origin.url, "compress": ["br", "gzip"]}
    edge = await make_edge(
        domains=[{**compressing, "compress_max_bytes": "8MiB"}],
        cache={"max_bytes": "64MiB", "max_object_bytes": "16MiB"},
    )
    big = page(4 * 1024**2, seed=3)
    origin.reply("/big", big, headers=HTML)
    origin.reply("/small", b"small", headers={"Cache-Control": "max-age=60"})
    await edge.get("/small")
    response, body = await edge.get("/big", headers={"Accept-Encoding": "br"})
    assert "Content-Encoding" not in response.headers
    assert body == big
    assert response.headers["Vary"] == "Accept-Encoding"
    answered = 0

    async def br_copy_stored() -> bool:
        nonlocal answered
        response, _ = await edge.get("/small")
        assert response.status == 200
        answered += 1
        hit, body = await edge.get("/big", headers={"Accept-Encoding": "br"})
        return hit.headers.get("Content-Encoding") == "br" and decoded("br", body) == big

    await until(br_copy_stored, within=30)
    assert origin.count("/big") == 1 + (answered - 1)  # each miss before the copy asked
    response, body = await edge.get("/big", headers={"Accept-Encoding": "gzip"})
    assert response.headers["Content-Encoding"] == "gzip"
    assert "hit" in response.headers["Cache-Status"]
    assert decoded("gzip", body) == big


async def test_answers_made_per_user_are_never_compressed(
    edge: EdgeUnderTest, origin: Origin
) -> None:
    """BREACH (decision 0046): an answer that varies on Cookie (or Authorization) may hold a
    user's secret beside text an attacker chooses; compressed, its length would tell the
    attacker a byte of the secret per guess. It is stored and served as the origin sent it."""
    origin.reply("/account", BODY, headers={**HTML, "Vary": "Cookie"})
    for _ in range(2):
        response, body = await edge.get(
            "/account", headers={"Accept-Encoding": "br, gzip", "Cookie": "session=1"}
        )
        assert "Content-Encoding" not in response.headers
        assert body == BODY
    assert origin.count("/account") == 1  # stored all the same


async def test_a_body_over_compress_max_bytes_is_stored_as_sent(
    make_edge: EdgeFactory, origin: Origin
) -> None:
    edge = await make_edge(
        domains=[{**COMPRESSING, "origin": origin.url, "compress_max_bytes": 10_000}]
    )
    origin.reply("/big", BODY, headers=HTML)  # 20,000 bytes
    for _ in range(2):
        response, body = await edge.get("/big", headers={"Accept-Encoding": "br"})
        assert "Content-Encoding" not in response.headers
        assert body == BODY
    assert origin.count("/big") == 1
    assert edge.edge._filler.compressions.refused == 0  # not asked: over the cap


async def test_with_the_queue_full_answers_go_out_as_sent(
    make_edge: EdgeFactory, origin: Origin
) -> None:
    """Decision 0046: a body the compression queue has no room for is not compressed now:
    stored and answered as sent; a later miss of a coding compresses it once there is room."""
    edge = await make_edge(
        domains=[{**COMPRESSING, "origin": origin.url}],
        edge={"listen": "127.0.0.1:0", "compress_queue_bytes": 10_000},
    )
    origin.reply("/page", BODY, headers=HTML)  # 20,000 bytes: never fits
    response, body = await edge.get("/page", headers={"Accept-Encoding": "br"})
    assert "Content-Encoding" not in response.headers
    assert body == BODY
    assert response.headers["Vary"] == "Accept-Encoding"
    metrics = (await edge.telemetry.exposition()).decode()
    assert "cdn_proxy_compress_refused_total 1.0" in metrics
    assert "cdn_proxy_compress_queue_max_bytes 10000.0" in metrics
    response, body = await edge.get("/page", headers={"Accept-Encoding": "identity"})
    assert "hit" in response.headers["Cache-Status"]  # its copy as sent is stored
    edge.edge._filler.compressions.max_bytes = 1 << 20  # room now
    response, body = await edge.get("/page", headers={"Accept-Encoding": "br"})
    assert response.headers["Content-Encoding"] == "br"  # compressed before its answer
    assert decoded("br", body) == BODY


async def curl(url: str, *args: str) -> tuple[bytes, bytes]:
    """curl's (headers, body) for ``url``, its extra ``args`` given."""
    assert CURL is not None
    process = await asyncio.create_subprocess_exec(
        CURL,
        "-sS",
        "-D",
        "-",
        "-H",
        "Host: example.com",
        *args,
        url,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    assert process.returncode == 0, err
    head, _, body = out.partition(b"\r\n\r\n")
    return head.lower(), body


async def test_curl_compressed_decodes_the_edge_copy(edge: EdgeUnderTest, origin: Origin) -> None:
    """curl --compressed asks for every coding it can decode (br, gzip, zstd...), gets br,
    and decodes it to the origin's bytes; plain curl (no Accept-Encoding) gets identity."""
    origin.reply("/page", BODY, headers=HTML)
    head, body = await curl(edge.url + "/page", "--compressed")
    assert b"\r\ncontent-encoding: br" in head
    assert body == BODY
    head, body = await curl(edge.url + "/page")
    assert b"content-encoding" not in head
    assert (body, b"\r\nvary: accept-encoding" in head) == (BODY, True)
    assert origin.count("/page") == 1


async def test_bytes_on_the_wire(edge: EdgeUnderTest, origin: Origin) -> None:
    """A raw socket: the br answer's framing is its own (Content-Length of the br bytes), and
    the bytes after the head are exactly the br copy, nothing more."""
    origin.reply("/page", BODY, headers=HTML)
    await edge.get("/page", headers={"Accept-Encoding": "identity"})
    host, port = edge.url.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(
        b"GET /page HTTP/1.1\r\nHost: example.com\r\nAccept-Encoding: br\r\n"
        b"Connection: close\r\n\r\n"
    )
    raw = await reader.read()
    writer.close()
    await writer.wait_closed()
    head, _, body = raw.partition(b"\r\n\r\n")
    fields = dict(line.split(b": ", 1) for line in head.split(b"\r\n")[1:])
    assert head.startswith(b"HTTP/1.1 200 ")
    assert fields[b"Content-Encoding"] == b"br"
    assert int(fields[b"Content-Length"]) == len(body)
    assert bytes(brotli.decompress(body)) == BODY
    assert len(body) < len(BODY) // 2


@pytest.mark.slow
async def test_a_304_refreshes_each_copy_and_keeps_it_apart(
    edge: EdgeUnderTest, origin: Origin
) -> None:
    """After a soft purge every copy is revalidated with its (weak) ETag; the origin's 304,
    even with a Vary of its own, refreshes it and it stays the copy of its coding."""
    full = 0

    async def validated(request: web.Request) -> web.StreamResponse:
        nonlocal full
        if request.headers.get("If-None-Match", "").removeprefix("W/") == '"v1"':
            return web.Response(status=304, headers={"ETag": '"v1"', "Vary": "Origin"})
        full += 1
        return web.Response(body=BODY, headers=HTML)

    origin.route("/page", validated)
    for accept, _ in CLIENTS:
        await edge.get("/page", headers={"Accept-Encoding": accept})
    await edge.store.purge("example.com", purge_request("url", ["/page"], soft=True))
    for _ in range(2):
        for accept, coding in CLIENTS:
            response, body = await edge.get("/page", headers={"Accept-Encoding": accept})
            assert response.headers.get("Content-Encoding", "identity") == coding
            assert decoded(coding, body) == BODY
            assert "Accept-Encoding" in response.headers["Vary"]
    assert full == 1
    assert origin.count("/page") == 5  # the fill, then one 304 per stored copy
