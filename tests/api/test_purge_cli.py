"""``cdn-proxy purge`` with kinds and options: the receipt printed for people and as JSON,
through a real node; and what it refuses before sending anything (``--url`` was the API's
base URL before issue 15; it is now a path, and the base is ``--api``)."""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from aiohttp.test_utils import TestServer

from proxy.core.purge.receipts import FIELDS
from tests.api.purge_support import purge_node
from tests.api.support import DOMAIN, OTHER, ApiFactory
from tests.api.test_cli import purge
from tests.api.test_fixes_i14 import recording_api
from tests.edge.test_purges_end_to_end import URLS
from tests.nodes import cli

Served = Callable[..., Awaitable[TestServer]]
SIZE = r"\d+(\.\d)? (B|KiB|MiB)"
TOOK = r" in \d+\.\d+ m?s"


@pytest.mark.parametrize("value", ["http://127.0.0.1:8081", "HTTPS://api.example"])
async def test_an_api_url_given_to_url_is_refused(aiohttp_server: Served, value: str) -> None:
    """The old spelling (``--url`` for the base) must never purge the wrong thing."""
    seen: list[str] = []
    api = await recording_api(aiohttp_server, seen)
    code, out, err = await cli("purge", DOMAIN, "--url", value, "--api", api, "--token", "t")
    assert (code, out) == (2, "")
    assert err.strip() == (
        f"cdn-proxy: --url {value!r}: --url now takes a path to purge (such as /page?x=1); "
        "the API's base URL goes in --api (or CDN_PROXY_URL)"
    )
    assert seen == []


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--url", "/a", "--tag", "t"], "argument --tag: not allowed with argument --url"),
        (["--prefix", "/a", "--url", "/b"], "not allowed with argument --prefix"),
        (["--api", "{api}", "--api", "{api}"], "--api given more than once"),
        (["--soft=yes"], "--soft: ignored explicit argument"),
    ],
)
async def test_one_kind_per_purge(aiohttp_server: Served, argv: list[str], message: str) -> None:
    seen: list[str] = []
    api = await recording_api(aiohttp_server, seen)
    args = [arg.replace("{api}", api) for arg in argv]
    code, out, err = await cli("purge", DOMAIN, *args, "--api", api, "--token", "t")
    assert (code, out) == (2, "")
    assert message in err
    assert seen == []


async def test_the_base_comes_from_the_environment_and_the_path_from_url(
    capsys: pytest.CaptureFixture[str], make_api: ApiFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    api = await make_api()
    environment = {"URL": str(api.client.make_url("/")), "TOKEN": api.tokens["scoped"]}
    for name, value in environment.items():
        monkeypatch.setenv(f"CDN_PROXY_{name}", value)
    code, out, err = await purge(capsys, OTHER, "--url", "/x", "--url", "/y")
    assert (code, err) == (0, "")
    assert re.fullmatch(
        rf"purged 2 URLs of other\.test: 1 entry, {SIZE} \(purge \d+\){TOOK}\n", out
    ), out
    assert not (await api.store.lookup(OTHER, "/x")).variants
    assert (await api.store.lookup(DOMAIN, "/x")).variants


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--tag", "a,b"], "400 Bad Request: the field 'tags': tag 'a,b' must be"),
        (["--url", "page"], "400 Bad Request: the field 'urls': url 'page' must be a path"),
        (["--prefix", "/", "--token", "scoped"], "403 Forbidden: this token may not purge"),
    ],
)
async def test_a_refused_purge_prints_the_problem(
    capsys: pytest.CaptureFixture[str], make_api: ApiFactory, argv: list[str], message: str
) -> None:
    api = await make_api()
    if "--token" in argv:
        argv = [*argv[:-2], "--token", api.tokens["scoped"]]
    else:
        argv = [*argv, "--token", api.tokens["deploy"]]
    code, out, err = await purge(capsys, DOMAIN, *argv, "--api", str(api.client.make_url("")))
    assert (code, out) == (1, "")
    assert err.startswith("cdn-proxy: purge failed: ")
    assert message in err


async def test_receipts_read_by_people_and_as_json_from_a_real_node(
    tmp_path: Path, aiohttp_server: Served
) -> None:
    async with purge_node(tmp_path, aiohttp_server) as node:
        for url in URLS:  # every URL cached
            await node.get(url)
        base = ["--api", node.node.api, "--token", node.token]

        code, out, err = await cli("purge", DOMAIN, "--tag", "all-tagged", "--dry-run", *base)
        assert code == 0, err
        line, sample = out.splitlines()
        assert re.fullmatch(
            rf"would purge 1 tag of example\.com: 3 entries, {SIZE}{TOOK}; nothing was changed",
            line,
        ), out
        assert sorted(sample.removeprefix("sample: ").split()) == [
            "/assets/a.css",
            "/assets/b.js",
            "/page",
        ]

        code, out, err = await cli("purge", DOMAIN, "--prefix", "/assets/", "--soft", *base)
        assert code == 0, err
        assert re.fullmatch(
            rf"soft-purged 1 prefix of example\.com: at most 4 entries, {SIZE} \(a dry run "
            rf"counts them exactly\) \(purge \d+\){TOOK}\n",
            out,
        ), out

        code, out, err = await cli("purge", DOMAIN, "--url", "/page", "--json", *base)
        assert code == 0, err
        receipt = json.loads(out)
        assert list(receipt) == list(FIELDS)
        assert (receipt["kind"], receipt["items"], receipt["entries"], receipt["exact"]) == (
            "url",
            ["/page"],
            1,
            True,
        )

        code, out, err = await cli("purge", DOMAIN, "--dry-run", "--json", *base)
        assert code == 0, err
        assert json.loads(out)["kind"] == "all"

        code, out, err = await cli("purge", DOMAIN, *base)  # as before: clear-cache
        assert (code, out, err) == (0, "Cache cleared\n", "")
