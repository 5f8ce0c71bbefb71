"""Early Hints on hits (a domain's ``early_hints``, decision 0049): a stored answer's ``Link``
fields of relation preload or preconnect are sent as a 103 before it, as Cloudflare's Early
Hints does; off by default, when a hit sends no interim answer (the suite's
``interim-not-cached``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from h2.events import Event, InformationalResponseReceived, ResponseReceived

from proxy.edge.interim import preload_links
from proxy.process.service import running
from tests.conftest import EdgeFactory, EdgeUnderTest
from tests.edge.h2_support import RawH2
from tests.edge.tls_support import Certificates, pair_keys, tls_config
from tests.security.support import RawOrigin, exchange, ok

LINKS = b"Link: </s.css>; rel=preload; as=style, </about>; rel=canonical\r\n"
PAGE = ok(b"page", "max-age=60", LINKS)


@pytest.fixture
async def origin_with_links() -> AsyncIterator[RawOrigin]:
    server = RawOrigin(lambda request: PAGE)
    await server.start()
    yield server
    await server.stop()


async def edge_for(make_edge: EdgeFactory, server: RawOrigin, **domain: object) -> EdgeUnderTest:
    return await make_edge(domains=[{"name": "example.com", "origin": server.url, **domain}])


def get(version: bytes = b"1.1") -> bytes:
    return b"GET /page HTTP/%s\r\nHost: example.com\r\nConnection: close\r\n\r\n" % version


async def test_a_hit_sends_its_preloads_as_a_103_first(
    make_edge: EdgeFactory, origin_with_links: RawOrigin
) -> None:
    edge = await edge_for(make_edge, origin_with_links, early_hints=True)
    await exchange(edge.url, get())
    hit = await exchange(edge.url, get())
    assert hit.statuses == [103, 200]
    hint, final = hit.responses
    assert [v for n, v in hint.headers if n == "Link"] == ["</s.css>; rel=preload; as=style"]
    assert "hit" in (final.header("Cache-Status") or "") and final.body == b"page"
    assert final.header("Link") == "</s.css>; rel=preload; as=style, </about>; rel=canonical"
    assert len(origin_with_links.requests) == 1
    # Never to an HTTP/1.0 client.
    assert (await exchange(edge.url, get(b"1.0"))).statuses == [200]


async def test_off_by_default_a_hit_sends_no_interim_answer(
    make_edge: EdgeFactory, origin_with_links: RawOrigin
) -> None:
    edge = await edge_for(make_edge, origin_with_links)
    await exchange(edge.url, get())
    assert (await exchange(edge.url, get())).statuses == [200]


async def test_over_http2_a_hit_sends_its_103_as_headers(
    tmp_path: Path, origin_with_links: RawOrigin
) -> None:
    certs = Certificates(tmp_path)
    config = tls_config(
        tmp_path,
        origin_with_links.url,
        edge={**pair_keys(certs.issue("example.com")), "h2c": True},
        domains={"example.com": {"early_hints": True}},
    )
    async with running(config) as service:
        client = await RawH2.open(service.edge_url)
        await client.answer(client.request("/page"))
        stream = client.request("/page")
        events: list[Event] = []
        while not client.answers[stream].ended:
            events += await client.read_events()
        await client.close()
    kinds = [type(event) for event in events if getattr(event, "stream_id", 0) == stream]
    assert kinds.index(InformationalResponseReceived) < kinds.index(ResponseReceived)
    assert "hit" in client.answers[stream].headers["cache-status"]


@pytest.mark.parametrize(
    ("value", "hinted"),
    [
        ("</a.css>; rel=preload; as=style", ["</a.css>; rel=preload; as=style"]),
        (
            '</b.js>; rel="preload"; as=script, </c>; rel=next',
            ['</b.js>; rel="preload"; as=script'],
        ),
        ("<https://cdn.test>; rel=preconnect", ["<https://cdn.test>; rel=preconnect"]),
        ('</d>; rel="prefetch preload"', ['</d>; rel="prefetch preload"']),
        ("</e>; rel=canonical", []),
        ('</f>; title="a, b"; rel=preload', ['</f>; title="a, b"; rel=preload']),
        ("not a link", []),
    ],
)
def test_preload_links(value: str, hinted: list[str]) -> None:
    """RFC 8288 §3: link-values separated by commas; the relations browsers act on in a 103."""
    fields = (("Content-Type", "text/html"), ("Link", value))
    assert [v for _, v in preload_links(fields)] == hinted
