"""The compressing itself, for the copies core/http/compression.py decides on (decision 0035).

It runs once per stored object, in a thread (``asyncio.to_thread``), so the event loop keeps
answering while a large body is compressed. Each coding is fed in slices of ``SLICE`` bytes:
every slice is one short call into C, and the GIL is free between them even where a binding
holds it during a call, so the loop thread never waits on a whole body.

Levels: brotli quality 9 (window 4 MiB), gzip 6, zstd 12: each object is compressed once and
served many times, so higher than a per-hit compressor affords (nginx's gzip_comp_level is 1),
but not the top levels: brotli 11, gzip 9 and zstd 19 cost 3 to 13 times the CPU for 1 to 9%
fewer bytes, and a large object would hold a thread for seconds (decision 0035 has the
measurements).
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Callable

import brotli
import zstandard

SLICE = 64 * 1024
BROTLI_QUALITY = 9
BROTLI_WINDOW = 22
GZIP_LEVEL = 6
ZSTD_LEVEL = 12


async def compressed(body: bytes, codings: tuple[str, ...]) -> dict[str, bytes]:
    """The body in each of ``codings`` (br, gzip, zstd), compressed in a worker thread."""
    return await asyncio.to_thread(encode_all, body, codings)


def encode_all(body: bytes, codings: tuple[str, ...]) -> dict[str, bytes]:
    return {coding: encode(body, coding) for coding in codings}


def encode(body: bytes, coding: str) -> bytes:
    """The body in ``coding``, fed to the compressor a slice at a time."""
    process, finish = _compressor(coding, len(body))
    view = memoryview(body)
    parts = [process(view[start : start + SLICE]) for start in range(0, len(body), SLICE)]
    parts.append(finish())
    return b"".join(parts)


Process = Callable[[memoryview], bytes]


def _compressor(coding: str, size: int) -> tuple[Process, Callable[[], bytes]]:
    if coding == "br":
        br = brotli.Compressor(quality=BROTLI_QUALITY, lgwin=BROTLI_WINDOW)
        return br.process, br.finish
    if coding == "gzip":
        gz = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 31)  # 16 + 15: the gzip wrapper
        return gz.compress, gz.flush
    if coding == "zstd":
        zs = zstandard.ZstdCompressor(level=ZSTD_LEVEL).compressobj(size=size)
        return zs.compress, zs.flush
    raise ValueError(f"cannot compress to {coding!r}")
