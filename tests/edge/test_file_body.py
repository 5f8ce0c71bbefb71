"""Sending a stored body file (proxy/edge/file_body.py, decision 0039), in process: a real
shared tier on a real directory, a real aiohttp server answering with ``FilePayload``, a real
client. Which way each send went (sendfile or checked reads) is read from the process's
record of checked files, and every body is compared byte for byte."""

from __future__ import annotations

import hashlib
import os
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from proxy.core.cache.entry import StoredResponse
from proxy.edge.file_body import FilePayload
from proxy.store.memory import MemoryStore
from proxy.store.shared import SharedTier
from proxy.store.shared.bodies import Verified
from proxy.store.shared.large import BodyFile, FileBacked
from proxy.store.tiered import TieredStore

BODY = hashlib.shake_256(b"file body").digest(3 * (1 << 20) + 12345)  # not a whole chunk


@pytest.fixture
def tier(tmp_path: Path) -> Iterator[SharedTier]:
    opened = SharedTier.open_node(tmp_path / "cache", max_bytes=64 << 20)
    yield opened
    opened.close()


async def stored(tier: SharedTier, *, sendfile: bool = False) -> FileBacked:
    """BODY streamed into the tier as a fill does (``TieredStore.stream``)."""
    tiered = TieredStore(MemoryStore(max_bytes=1 << 20), tier, sendfile=sendfile)
    found = await tiered.lookup("example.com", "/f")
    response = StoredResponse(
        status=200, reason="OK", headers=(), body=b"", birth=2e9, freshness_lifetime=600.0
    )
    fill = tiered.stream(found.key, response)
    assert fill is not None
    for start in range(0, len(BODY), 65536):
        assert await fill.append(BODY[start : start + 65536])
    entry = await fill.commit()
    assert entry is not None
    return entry


def stat_of(file: BodyFile) -> os.stat_result:
    fd, stat = file.open()
    os.close(fd)
    return stat


async def get(file: BodyFile, ranges: tuple[int, int] | None = None) -> bytes:
    async def handle(request: web.Request) -> web.Response:
        payload = FilePayload(file) if ranges is None else FilePayload(file, *ranges)
        return web.Response(body=payload)

    app = web.Application()
    app.router.add_get("/", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        async with (
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as client,
            client.get(f"http://127.0.0.1:{port}/") as response,
        ):
            assert response.status == 200
            return await response.read()
    finally:
        await runner.cleanup()


def fresh_view(entry: FileBacked) -> BodyFile:
    """The same file as another process sees it: checked by no one yet."""
    return BodyFile(entry.file.entry, entry.file.tier, Verified())


@pytest.mark.parametrize("sendfile", [False, True])
async def test_a_verified_file_goes_by_sendfile_only_with_cache_sendfile(
    tier: SharedTier, monkeypatch: pytest.MonkeyPatch, sendfile: bool
) -> None:
    """[cache] sendfile: a file checked whole is sent by sendfile on plain HTTP/1.1, else
    read and written (both without checking its chunks again). Each system call is counted
    on its way to the real one."""
    calls: Counter[str] = Counter()

    def counted(name: str) -> Callable[..., int | bytes]:
        real = getattr(os, name)

        def call(*args: Any) -> int | bytes:
            calls[name] += 1
            result: int | bytes = real(*args)
            return result

        return call

    for name in ("sendfile", "pread"):
        monkeypatch.setattr(os, name, counted(name))
    entry = await stored(tier, sendfile=sendfile)
    assert stat_of(entry.file) in entry.file.verified
    assert await get(entry.file) == BODY
    assert await get(entry.file, (1_000_000, 2_500_001)) == BODY[1_000_000:2_500_001]
    assert (calls["sendfile"] > 0, calls["pread"] > 0) == (sendfile, not sendfile), calls


async def test_the_fills_own_process_sends_the_file_without_checking_it(tier: SharedTier) -> None:
    entry = await stored(tier, sendfile=True)
    stat = stat_of(entry.file)
    assert stat in entry.file.verified  # the fill took the CRCs of what it wrote
    assert await get(entry.file) == BODY
    assert await get(entry.file, (1_000_000, 2_500_001)) == BODY[1_000_000:2_500_001]


async def test_a_file_is_read_and_checked_until_one_send_has_read_it_whole(
    tier: SharedTier,
) -> None:
    file = fresh_view(await stored(tier))
    stat = stat_of(file)
    assert await get(file, (5, 70_000)) == BODY[5:70_000]
    assert stat not in file.verified  # a part: not the whole file checked
    assert await get(file) == BODY
    assert stat in file.verified  # read through, every chunk matched: sendfile from now on
    assert await get(file) == BODY


@pytest.mark.slow
@pytest.mark.parametrize(
    ("chunk", "seen"),
    [
        # In the first batch read: nothing was sent, the connection closes with no answer.
        (1, aiohttp.ServerDisconnectedError),
        # Later: the head and the first MiB were sent, then the body is cut short.
        (20, aiohttp.ClientPayloadError),
    ],
)
async def test_a_file_changed_in_place_is_checked_again_and_never_sent_whole(
    tier: SharedTier, chunk: int, seen: type[Exception]
) -> None:
    entry = await stored(tier)
    path = entry.file.entry.path
    assert path is not None
    with path.open("r+b") as opened:  # one byte of the chunk, flipped
        opened.seek(chunk * 65536 + 7)
        byte = opened.read(1)
        opened.seek(chunk * 65536 + 7)
        opened.write(bytes([byte[0] ^ 1]))
    assert stat_of(entry.file) not in entry.file.verified  # its time changed
    with pytest.raises(seen):
        await get(entry.file)
    assert tier.is_doomed(entry.file.entry.key)  # removed at next write
