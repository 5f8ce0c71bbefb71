"""``cdn-proxy purge`` with kinds and options: the receipt printed for people and as JSON,
through a real node; and what it refuses before sending anything (``--url`` was the API's
base URL before issue 15; it is now a path, and the base is ``--api``)."""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from benchmarks.ports import free_port
from proxy.core.purge.receipts import FIELDS
from tests.api.purge_support import purge_node
from tests.api.support import DOMAIN, OTHER, ApiFactory, recording_api
from tests.api.test_cli import purge
from tests.conftest import Origin
from tests.edge.test_purges_end_to_end import URLS
from tests.nodes import Node, cli, start, write_config

Served = Callable[..., Awaitable[TestServer]]
SIZE = r"\d+(\.\d)? (B|KiB|MiB)"
TOOK = r" in \d+\.\d+ m?s"


@pytest.mark.slow
@pytest.mark.parametrize("value", ["http://127.0.0.1:8081", "HTTPS://api.example/"])
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


@pytest.mark.slow
async def test_a_page_url_given_to_url_is_refused_as_what_it_is(aiohttp_server: Served) -> None:
    """Issue 22 item 8: ``--url https://a.test/x`` was blamed on --api, though it was a
    page's URL. The message now says what was given, and the path to give instead."""
    seen: list[str] = []
    api = await recording_api(aiohttp_server, seen)
    given = "https://a.test/x?y=1"
    code, out, err = await cli("purge", DOMAIN, "--url", given, "--api", api, "--token", "t")
    assert (code, out) == (2, "")
    assert err.strip() == (
        f"cdn-proxy: --url {given!r} is a full URL, and --url takes the path to purge on the "
        "domain given first: --url /x?y=1"
    )
    assert seen == []


@pytest.mark.slow
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


@pytest.mark.slow
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
            rf"soft-purged 1 prefix of example\.com: not counted, among the domain's 4 entries, "
            rf"{SIZE} \(a dry run counts them\) \(purge \d+\){TOOK}\n",
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


def with_api_listen(config: Path, listen: str) -> Path:
    """The config with its [api] table listening on ``listen`` (write_config's is port 0)."""
    text = config.read_text(encoding="utf-8")
    head, api, tail = text.partition('[api]\nlisten = "127.0.0.1:0"')
    assert api, text
    config.write_text(f'{head}[api]\nlisten = "{listen}"{tail}', encoding="utf-8")
    return config


@pytest.mark.slow
async def test_purge_finds_the_api_in_the_nodes_config(
    tmp_path: Path, origin: Origin, nodes: list[Node]
) -> None:
    """Issue 22 item 8: ``purge --config`` (as ``token`` and ``admin`` take it), so that a
    deploy hook on the node need not repeat the API's address. A wildcard listen address
    is reached on loopback."""
    origin.reply("/page", b"page", headers={"Cache-Control": "max-age=600"})
    config = with_api_listen(write_config(tmp_path, origin.url), f"0.0.0.0:{free_port()}")
    node = await start(nodes, config)
    code, token, err = await cli(
        "token", "create", "hook", "--all-domains", "--config", str(config)
    )
    assert code == 0, err
    async with aiohttp.ClientSession() as client:
        async with client.get(node.edge + "/page", headers={"Host": DOMAIN}) as response:
            assert response.status == 200
        args = ["purge", DOMAIN, "--url", "/page", "--config", str(config), "--token"]
        code, out, err = await cli(*args, token.strip())
        assert (code, err) == (0, "")
        assert out.startswith(f"purged 1 URL of {DOMAIN}: 1 entry"), out
        async with client.get(node.edge + "/page", headers={"Host": DOMAIN}) as response:
            assert response.status == 200
    assert origin.count("/page") == 2  # the purge took the entry away


@pytest.mark.slow
@pytest.mark.parametrize(
    ("listen", "extra", "message"),
    [
        ("127.0.0.1:0", [], "api.listen has port 0 (a port the OS picks at each start): give"),
        (
            "127.0.0.1:1",
            ["--api", "http://127.0.0.1:1"],
            "argument --api: not allowed with argument --config",
        ),
    ],
)
async def test_purge_config_refusals(
    tmp_path: Path, origin: Origin, listen: str, extra: list[str], message: str
) -> None:
    config = with_api_listen(write_config(tmp_path, origin.url), listen)
    code, out, err = await cli("purge", DOMAIN, "--config", str(config), *extra, "--token", "t")
    assert (code, out) == (2, "")
    assert message in err


@pytest.mark.slow
async def test_purge_config_names_a_bad_file(tmp_path: Path) -> None:
    code, out, err = await cli("purge", DOMAIN, "--config", str(tmp_path / "none.toml"))
    assert (code, out) == (2, "")
    assert err.strip() == f"cdn-proxy: {tmp_path / 'none.toml'}: no such file"
