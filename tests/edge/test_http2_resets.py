"""MadeYouReset (2025): a client that makes the SERVER reset its streams, with frames that
are each a stream error (RFC 9113 §5.4.2), gets past a budget that counts only the resets
the client sends (Rapid Reset's, CVE-2023-44487). The edge counts the resets it sends for
what a client did against the same budget (decision 0036): past it, GOAWAY
ENHANCE_YOUR_CALM and close; the provoked streams cost the origin nothing, and another
connection is served all the while. Raw frames, as h2 would refuse to send them."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from h2.errors import ErrorCodes
from hpack import Encoder
from hyperframe.frame import DataFrame, HeadersFrame, WindowUpdateFrame

from proxy.process.service import Service, running
from tests.conftest import Origin
from tests.edge.h2_support import FrameReader, RawH2, headers_block, headers_frame
from tests.edge.test_http2_limits import others_still_served
from tests.edge.tls_support import Certificates, pair_keys, tls_config

RST_STREAM, GOAWAY = 0x3, 0x7
BUDGET = 20


@pytest.fixture
def certs(tmp_path: Path) -> Certificates:
    return Certificates(tmp_path)


@asynccontextmanager
async def edge(tmp_path: Path, origin: Origin, certs: Certificates) -> AsyncIterator[Service]:
    origin.reply("/ok", b"still served", headers={"Cache-Control": "max-age=60"})
    keys = {**pair_keys(certs.issue("example.com")), "http2_reset_budget": BUDGET}
    async with running(tls_config(tmp_path, origin.url, edge=keys)) as service:
        yield service


def window_update_of_zero(encoder: Encoder, stream_id: int) -> bytes:
    """A request, then a WINDOW_UPDATE of 0 on its stream (§6.9: a stream error)."""
    head = headers_frame(stream_id, headers_block(encoder, f"/m{stream_id}"), end=False)
    return head + WindowUpdateFrame(stream_id, window_increment=0).serialize()


def malformed_head(encoder: Encoder, stream_id: int) -> bytes:
    """A request whose head has an upper-case field name (§8.2.1: malformed)."""
    fields = [(":method", "GET"), (":path", f"/m{stream_id}"), (":scheme", "https")]
    block = bytes(encoder.encode([*fields, (":authority", "example.com"), ("X-Upper", "1")]))
    return headers_frame(stream_id, block)


def content_length_overrun(encoder: Encoder, stream_id: int) -> bytes:
    """A POST that says Content-Length 1 and sends 2 bytes (§8.1.1: malformed)."""
    fields = [(":method", "POST"), (":path", f"/m{stream_id}"), (":scheme", "https")]
    block = bytes(encoder.encode([*fields, (":authority", "example.com"), ("content-length", "1")]))
    head = HeadersFrame(stream_id, data=block, flags={"END_HEADERS"}).serialize()
    return head + DataFrame(stream_id, data=b"xx", flags={"END_STREAM"}).serialize()


def data_after_end_stream(encoder: Encoder, stream_id: int) -> bytes:
    """A request that ends with its head, then DATA on it (§5.1: half-closed, a stream
    error STREAM_CLOSED), while the server is still answering it."""
    head = headers_frame(stream_id, headers_block(encoder, f"/m{stream_id}"))
    return head + DataFrame(stream_id, data=b"x").serialize()


@pytest.mark.slow
@pytest.mark.parametrize(
    "provoke",
    [window_update_of_zero, malformed_head, content_length_overrun, data_after_end_stream],
    ids=lambda f: f.__name__,
)
async def test_server_resets_spend_the_reset_budget(
    tmp_path: Path,
    origin: Origin,
    certs: Certificates,
    provoke: Callable[[Encoder, int], bytes],
) -> None:
    """Each provocation is one stream error, the stream reset while its request would still
    be served: without the count, a client could leave any number of them running."""
    async with edge(tmp_path, origin, certs) as service:
        assert service.tls_url is not None
        client = await RawH2.open(service.tls_url, certs.client())
        frames = FrameReader(client)
        encoder = Encoder()
        client.flush()
        for i in range(BUDGET):  # one at a time: each is reset, the connection lives on
            stream_id = 1 + 2 * i
            client.send_raw(provoke(encoder, stream_id))
            kind, reset, _ = await frames.next(not_of=(0x4, 0x6, 0x8))
            assert (kind, reset) == (RST_STREAM, stream_id)
        client.send_raw(provoke(encoder, 1 + 2 * BUDGET))
        kind, _, payload = await frames.next(not_of=(RST_STREAM, 0x4, 0x6, 0x8))
        assert kind == GOAWAY
        assert int.from_bytes(payload[4:8], "big") == ErrorCodes.ENHANCE_YOUR_CALM
        assert not [seen for seen in origin.seen if seen.target.startswith("/m")]
        await others_still_served(service, certs)
