"""Variant hygiene (issue 14 §7, decision 0023): one variant per content coding, whatever the
spelling of Accept-Encoding; Accept-Language keyed by its exact value, within a bound."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from yarl import URL

from proxy.errors import ConfigError
from proxy.store.memory import MAX_VARIANTS_PER_KEY
from tests.conftest import EdgeFactory, EdgeUnderTest, Origin, make_config
from tests.nodes import Node, write_config

# The eight spellings; None sends no Accept-Encoding at all.
SPELLINGS: list[str | None] = [
    "gzip, deflate, br",
    "br;q=1.0, gzip;q=0.8",
    "GZIP",
    "*",
    "gzip;q=0",
    "",
    None,
    "x-gzip, deflate",
]
# What each reads as with the default encodings (br, gzip, zstd).
EXPECTED = ["br", "br", "gzip", "br", "identity", "identity", "identity", "gzip"]


async def by_coding(request: web.Request) -> web.StreamResponse:
    """An origin that compresses as asked (here: names the coding it would use)."""
    asked = request.headers.get("Accept-Encoding", "(none)")
    return web.Response(
        text=f"encoded for {asked}",
        headers={"Cache-Control": "max-age=60", "Vary": "Accept-Encoding"},
    )


@pytest.fixture
async def client() -> AsyncIterator[aiohttp.ClientSession]:
    # No Accept-Encoding of aiohttp's own: each request sends exactly the spelling given.
    async with aiohttp.ClientSession(
        auto_decompress=False, skip_auto_headers=("Accept-Encoding",)
    ) as session:
        yield session


async def get(
    client: aiohttp.ClientSession, base: str, path: str, spelling: str | None
) -> tuple[int, str, str]:
    headers = {"Host": "example.com"}
    if spelling is not None:
        headers["Accept-Encoding"] = spelling
    async with client.get(URL(base + path, encoded=True), headers=headers) as response:
        return response.status, await response.text(), response.headers["Cache-Status"]


async def test_eight_spellings_make_one_entry_and_one_fetch_per_coding(
    edge: EdgeUnderTest, origin: Origin, client: aiohttp.ClientSession
) -> None:
    """Twice each spelling: three origin fetches (br, gzip, identity), three variants stored,
    and every client gets the variant of the coding it reads as."""
    origin.route("/page", by_coding)
    for _ in range(2):
        for spelling, coding in zip(SPELLINGS, EXPECTED, strict=True):
            status, body, _ = await get(client, edge.url, "/page", spelling)
            assert (status, body) == (200, f"encoded for {coding}")
    asked = [seen.headers.get("Accept-Encoding", "") for seen in origin.seen]
    assert sorted(asked) == ["br", "gzip", "identity"]  # one fetch per coding
    assert all(len(s.header_items) == len(dict(s.header_items)) for s in origin.seen)
    found = await edge.store.lookup("example.com", "/page")
    assert sorted(v.vary_values for v in found.variants) == [("br",), ("gzip",), ("identity",)]


async def test_a_domain_lists_its_own_codings_in_its_own_order(
    make_edge: EdgeFactory, tmp_path: Path, origin: Origin, client: aiohttp.ClientSession
) -> None:
    """``encodings = ["gzip", "identity"]``: br is never asked for, gzip wins over br."""
    edge = await make_edge(
        domains=[{"name": "example.com", "origin": origin.url, "encodings": ["gzip", "identity"]}]
    )
    origin.route("/page", by_coding)
    assert (await get(client, edge.url, "/page", "br, gzip"))[1] == "encoded for gzip"
    assert (await get(client, edge.url, "/page", "br"))[1] == "encoded for identity"
    status, body, cache = await get(client, edge.url, "/page", "gzip;q=0.5, br")
    assert (status, body) == (200, "encoded for gzip")
    assert "hit" in cache
    assert origin.count("/page") == 2


async def test_accept_language_keys_by_its_exact_value_within_the_variant_bound(
    edge: EdgeUnderTest, origin: Origin, client: aiohttp.ClientSession
) -> None:
    """Accept-Language is passed as is and, when the origin varies on it, keyed by its value
    (white space around commas aside, §4.1): a spelling is one variant, another spelling
    another; at most MAX_VARIANTS_PER_KEY are kept per URL, the newest."""

    async def by_language(request: web.Request) -> web.StreamResponse:
        language = request.headers.get("Accept-Language", "none")
        return web.Response(
            text=f"hello in {language}",
            headers={"Cache-Control": "max-age=60", "Vary": "Accept-Language"},
        )

    origin.route("/hello", by_language)

    async def hello(language: str) -> tuple[str, str]:
        async with client.get(
            edge.url + "/hello", headers={"Host": "example.com", "Accept-Language": language}
        ) as response:
            return await response.text(), response.headers["Cache-Status"]

    assert (await hello("en-GB, en;q=0.8"))[0] == "hello in en-GB, en;q=0.8"
    body, status = await hello("en-GB,en;q=0.8")  # the same value but for white space
    assert (body, "hit" in status) == ("hello in en-GB, en;q=0.8", True)
    assert (await hello("EN-gb, en;q=0.8"))[0] == "hello in EN-gb, en;q=0.8"  # exact value
    assert [s.headers["Accept-Language"] for s in origin.seen] == [
        "en-GB, en;q=0.8",
        "EN-gb, en;q=0.8",
    ]
    for n in range(2 * MAX_VARIANTS_PER_KEY):
        await hello(f"x-{n}")
    found = await edge.store.lookup("example.com", "/hello")
    assert len(found.variants) == MAX_VARIANTS_PER_KEY
    body, status = await hello(f"x-{2 * MAX_VARIANTS_PER_KEY - 1}")  # the newest stays
    assert "hit" in status


@pytest.mark.slow
async def test_a_served_node_fetches_once_per_coding(
    tmp_path: Path, origin: Origin, client: aiohttp.ClientSession
) -> None:
    """The issue's case against ``cdn-proxy serve`` in a child process: eight spellings,
    twice each, and the origin sees three requests."""
    origin.route("/page", by_coding)
    node = await Node.start(write_config(tmp_path, origin.url))
    try:
        for _ in range(2):
            for spelling, coding in zip(SPELLINGS, EXPECTED, strict=True):
                status, body, _ = await get(client, node.edge, "/page", spelling)
                assert (status, body) == (200, f"encoded for {coding}")
    finally:
        await node.kill()
    assert sorted(s.headers.get("Accept-Encoding", "") for s in origin.seen) == [
        "br",
        "gzip",
        "identity",
    ]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (["deflate"], "domains[0].encodings: 'deflate' is not one of br, gzip, zstd, identity"),
        ([], "domains[0].encodings: must be a non-empty list of codings"),
        (["identity", "br"], "domains[0].encodings: identity must come last"),
    ],
)
def test_a_bad_encodings_list_is_a_config_error(
    tmp_path: Path, value: object, message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        make_config(
            tmp_path,
            "http://127.0.0.1:9",
            domains=[{"name": "a.test", "origin": "http://127.0.0.1:9", "encodings": value}],
        )
    assert str(caught.value).startswith(message)
