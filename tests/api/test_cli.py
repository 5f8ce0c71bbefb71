"""The cdn-proxy command: token management on a real state file, and the purge client against
a real API server (run in a thread, since the client is blocking urllib)."""

from __future__ import annotations

import asyncio
import os
import re
import socket
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from proxy.cli.main import main
from proxy.core.auth.tokens import Scope, hash_token
from proxy.process.service import running
from proxy.state.sqlite import StateDB
from tests.api.support import DOMAIN, OTHER, ApiFactory, table_rows, write_cli_config
from tests.conftest import Origin, make_config

AiohttpServer = Callable[..., Awaitable[TestServer]]


@pytest.fixture(autouse=True)
def _no_proxies_or_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep test traffic on 127.0.0.1 and settings explicit, whatever the environment says."""
    for name in ["http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy"]:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("CDN_PROXY_URL", raising=False)
    monkeypatch.delenv("CDN_PROXY_TOKEN", raising=False)


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    return write_cli_config(tmp_path)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def state(config_file: Path) -> StateDB:
    return StateDB(config_file.parent / "var" / "state.db")


# -- token ---------------------------------------------------------------------------------------


def test_create_prints_only_the_token(
    capsys: pytest.CaptureFixture[str], config_file: Path
) -> None:
    code, out, err = run(
        capsys, "token", "create", "deploy", "--all-domains", "--config", str(config_file)
    )

    assert (code, err) == (0, "")
    [token] = out.splitlines()
    assert out == token + "\n"
    with state(config_file) as db:
        record = db.authenticate(token, 0.0)
    assert record is not None
    assert (record.name, record.scope) == ("deploy", Scope.everything())


def test_create_with_domains_normalises_them(
    capsys: pytest.CaptureFixture[str], config_file: Path
) -> None:
    code, out, _ = run(
        capsys, "token", "create", "ci", "--domain", "EXAMPLE.COM.", "--domain", OTHER,
        "--config", str(config_file),
    )  # fmt: skip

    assert code == 0
    with state(config_file) as db:
        record = db.authenticate(out.strip(), 0.0)
    assert record is not None and record.scope == Scope.only([DOMAIN, OTHER])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--domain", "unknown.example"], "'unknown.example' is not a configured domain"),
        (["--domain", DOMAIN, "--domain", "a b"], "'a b' is not a host name"),
        (["--domain", "example.com:80"], "not a host name"),
    ],
)
def test_create_refuses_domains_that_are_not_configured(
    capsys: pytest.CaptureFixture[str], config_file: Path, args: list[str], message: str
) -> None:
    code, out, err = run(capsys, "token", "create", "ci", *args, "--config", str(config_file))

    assert (code, out) == (2, "")
    assert message in err
    with state(config_file) as db:
        assert db.list_tokens() == []


@pytest.mark.parametrize("scope", [[], ["--all-domains", "--domain", DOMAIN]])
def test_create_needs_exactly_one_kind_of_scope(
    capsys: pytest.CaptureFixture[str], config_file: Path, scope: list[str]
) -> None:
    code, out, err = run(capsys, "token", "create", "ci", *scope, "--config", str(config_file))
    assert (code, out) == (2, "")
    assert "--domain" in err and "--all-domains" in err


@pytest.mark.parametrize(
    ("name", "code", "message"),
    [("deploy", 1, "a token named 'deploy' already exists"), ("bad name", 2, "bad token name")],
)
def test_create_refuses_bad_or_taken_names(
    capsys: pytest.CaptureFixture[str], config_file: Path, name: str, code: int, message: str
) -> None:
    run(capsys, "token", "create", "deploy", "--all-domains", "--config", str(config_file))
    result = run(capsys, "token", "create", name, "--all-domains", "--config", str(config_file))
    assert result[0] == code
    assert result[1] == ""
    assert message in result[2]
    assert "Traceback" not in result[2]


def test_list_shows_tokens_but_never_secrets(
    capsys: pytest.CaptureFixture[str], config_file: Path
) -> None:
    _, token, _ = run(
        capsys, "token", "create", "deploy", "--all-domains", "--config", str(config_file)
    )
    run(
        capsys,
        "token",
        "create",
        "ci",
        "--domain",
        OTHER,
        "--domain",
        DOMAIN,
        "--config",
        str(config_file),
    )
    with state(config_file) as db:
        db.authenticate(token.strip(), 1_700_000_000.0)

    code, out, _ = run(capsys, "token", "list", "--config", str(config_file))

    assert code == 0
    ci, deploy = table_rows(out)
    assert ci.keys() == {"NAME", "SCOPE", "CREATED", "LAST USED"}
    assert (ci["NAME"], ci["SCOPE"], ci["LAST USED"]) == ("ci", "example.com, other.test", "never")
    assert (deploy["NAME"], deploy["SCOPE"]) == ("deploy", "all domains")
    assert deploy["LAST USED"] == "2023-11-14 22:13:20Z"
    for row in (ci, deploy):
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ", row["CREATED"])
    assert token.strip() not in out and hash_token(token.strip()) not in out


def test_regenerate_prints_a_new_token_and_the_old_one_stops(
    capsys: pytest.CaptureFixture[str], config_file: Path
) -> None:
    _, old, _ = run(
        capsys, "token", "create", "deploy", "--all-domains", "--config", str(config_file)
    )

    code, new, err = run(capsys, "token", "regenerate", "deploy", "--config", str(config_file))

    assert (code, err) == (0, "")
    assert len(new.splitlines()) == 1 and new != old
    with state(config_file) as db:
        assert db.authenticate(old.strip(), 0.0) is None
        assert db.authenticate(new.strip(), 0.0) is not None


def test_revoke(capsys: pytest.CaptureFixture[str], config_file: Path) -> None:
    _, token, _ = run(
        capsys, "token", "create", "deploy", "--all-domains", "--config", str(config_file)
    )

    code, out, _ = run(capsys, "token", "revoke", "deploy", "--config", str(config_file))

    assert code == 0 and "deploy" in out
    with state(config_file) as db:
        assert db.authenticate(token.strip(), 0.0) is None


@pytest.mark.parametrize("action", ["regenerate", "revoke"])
def test_unknown_names_fail_cleanly(
    capsys: pytest.CaptureFixture[str], config_file: Path, action: str
) -> None:
    code, out, err = run(capsys, "token", action, "ghost", "--config", str(config_file))
    assert (code, out, err) == (1, "", "cdn-proxy: no token named 'ghost'\n")


@pytest.mark.parametrize(
    "argv",
    [
        ["serve", "--config", "{missing}"],
        ["token", "list", "--config", "{missing}"],
        ["serve", "--config", "{broken}"],
    ],
)
def test_config_errors_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str]
) -> None:
    broken = tmp_path / "broken.toml"
    broken.write_text("[edge]\nlisten = 'nowhere'\n", encoding="utf-8")
    paths = {"{missing}": str(tmp_path / "missing.toml"), "{broken}": str(broken)}

    code, out, err = run(capsys, *[paths.get(arg, arg) for arg in argv])

    assert (code, out) == (2, "")
    assert err.startswith("cdn-proxy: config error: ")
    assert len(err.splitlines()) == 1


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--version")
    assert (code, out) == (0, "cdn-proxy 0.1.0\n")


# -- purge ---------------------------------------------------------------------------------------


async def purge(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run the blocking client in a thread while the server keeps running on this loop."""
    code = await asyncio.to_thread(main, ["purge", *argv])
    out, err = capsys.readouterr()
    return code, out, err


async def test_purge_clears_the_domain(
    capsys: pytest.CaptureFixture[str], make_api: ApiFactory
) -> None:
    api = await make_api()
    url = str(api.client.make_url(""))

    result = await purge(capsys, DOMAIN, "--api", url, "--token", api.tokens["deploy"])

    assert result == (0, "Cache cleared\n", "")
    assert await api.is_cleared(DOMAIN)
    assert await api.is_untouched(OTHER)


async def test_purge_takes_url_and_token_from_the_environment(
    capsys: pytest.CaptureFixture[str], make_api: ApiFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    api = await make_api()
    monkeypatch.setenv("CDN_PROXY_URL", str(api.client.make_url("/")))
    monkeypatch.setenv("CDN_PROXY_TOKEN", api.tokens["scoped"])

    assert await purge(capsys, OTHER) == (0, "Cache cleared\n", "")
    assert await api.is_cleared(OTHER)


@pytest.mark.parametrize(
    ("domain", "token", "message"),
    [
        (DOMAIN, "cdnp_wrong", "401 Unauthorized: the token is not valid"),
        ("unknown.example", "deploy", "404 Not Found: 'unknown.example' is not a domain"),
        (DOMAIN, "scoped", "403 Forbidden: this token may not clear 'example.com'"),
        ("not a domain", "deploy", "400 Bad Request: the field 'domain' is not a host name"),
    ],
)
async def test_purge_failure_prints_the_problem_detail(
    capsys: pytest.CaptureFixture[str], make_api: ApiFactory, domain: str, token: str, message: str
) -> None:
    api = await make_api()
    url = str(api.client.make_url(""))

    code, out, err = await purge(
        capsys, domain, "--api", url, "--token", api.tokens.get(token, token)
    )

    assert (code, out) == (1, "")
    assert err.startswith("cdn-proxy: purge failed: ")
    assert message in err
    assert await api.is_untouched(DOMAIN)


async def test_purge_shows_a_plain_error_body(
    capsys: pytest.CaptureFixture[str], aiohttp_server: AiohttpServer
) -> None:
    async def gateway(request: web.Request) -> web.Response:
        return web.Response(status=502, text="upstream API is down")

    app = web.Application()
    app.router.add_post("/api/v1/cdn/clear-cache", gateway)
    server = await aiohttp_server(app)

    code, _, err = await purge(capsys, DOMAIN, "--api", str(server.make_url("")), "--token", "t")

    assert code == 1
    assert err == "cdn-proxy: purge failed: 502 Bad Gateway: upstream API is down\n"


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
async def test_purge_never_follows_a_redirect_with_the_token(
    capsys: pytest.CaptureFixture[str], aiohttp_server: AiohttpServer, status: int
) -> None:
    """urllib would follow a 302/303 as a GET and resend Authorization to the new host."""
    seen: list[str | None] = []

    async def elsewhere(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization"))
        return web.Response(text="Cache cleared")

    target_app = web.Application()
    target_app.router.add_route("*", "/{tail:.*}", elsewhere)
    target = await aiohttp_server(target_app)

    async def redirect(request: web.Request) -> web.Response:
        location = str(target.make_url("/api/v1/cdn/clear-cache"))
        return web.Response(status=status, headers={"Location": location})

    app = web.Application()
    app.router.add_post("/api/v1/cdn/clear-cache", redirect)
    server = await aiohttp_server(app)

    code, out, err = await purge(capsys, DOMAIN, "--api", str(server.make_url("")), "--token", "t")

    assert (code, out) == (1, "")
    assert err.startswith(f"cdn-proxy: purge failed: {status} ")
    assert seen == []


async def test_purge_reports_an_unreachable_server(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as sock:  # a port that was free a moment ago and has no listener
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]

    code, out, err = await purge(
        capsys, DOMAIN, "--api", f"http://127.0.0.1:{port}", "--token", "t"
    )

    assert (code, out) == (1, "")
    assert err.startswith(f"cdn-proxy: cannot reach http://127.0.0.1:{port}/api/v1/cdn/clear-cache")
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("command", "asked"), [("purge", DOMAIN), ("trace", f"http://{DOMAIN}/page")]
)
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--token", "t"], "no API URL"),
        (["--api", "http://127.0.0.1:1"], "no API token"),
        (["--api", "file:///etc/passwd", "--token", "t"], "must start with http"),
    ],
)
def test_purge_and_trace_need_a_url_and_a_token(
    capsys: pytest.CaptureFixture[str], command: str, asked: str, argv: list[str], message: str
) -> None:
    """Both API clients find the API one way (api_client.api_settings), and say what is
    missing."""
    code, out, err = run(capsys, command, asked, *argv)
    assert (code, out) == (2, "")
    assert message in err


@pytest.mark.parametrize(
    ("command", "asked"), [("purge", DOMAIN), ("trace", f"http://{DOMAIN}/page")]
)
@pytest.mark.parametrize(
    ("argv", "ways"),
    [
        (["--token", "t"], ["--api URL", "--config FILE", "CDN_PROXY_URL"]),
        (["--api", "http://127.0.0.1:1"], ["CDN_PROXY_TOKEN", "--token", "cdn-proxy token create"]),
    ],
)
def test_a_missing_setting_names_every_way_to_give_it(
    capsys: pytest.CaptureFixture[str], command: str, asked: str, argv: list[str], ways: list[str]
) -> None:
    """Issue 34 §4: "pass --api or set CDN_PROXY_URL" did not name --config, which the docs
    offer; the token's error now names where a token comes from, too."""
    code, out, err = run(capsys, command, asked, *argv)
    assert (code, out) == (2, "")
    assert all(way in err for way in ways), err
    assert err.count("\n") == 1  # one line


@pytest.mark.parametrize(
    ("command", "asked"), [("purge", DOMAIN), ("trace", f"http://{DOMAIN}/page")]
)
async def test_a_client_at_the_edge_says_the_status_once_and_what_to_check(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, origin: Origin, command: str, asked: str
) -> None:
    """The edge answers an API request 421 with a body that repeats its status line; both
    API clients (one POST: cli/api_client.py) print the status once, and say the URL may be
    the edge's (issue 14, section 8)."""
    async with running(make_config(tmp_path, origin.url)) as service:
        argv = [command, asked, "--api", service.edge_url, "--token", "t"]
        code = await asyncio.to_thread(main, argv)
        out, err = capsys.readouterr()
    assert (code, out) == (1, "")
    # The edge's port may hold "421" too (127.0.0.1:42129): count it apart.
    assert err.replace(service.edge_url, "").count("421") == 1, err
    assert err.startswith(f"cdn-proxy: {command} failed: 421 Misdirected Request: ")
    assert f"(is {service.edge_url} the API listener, not the edge?)" in err
    assert origin.seen == []  # the edge sent nothing on


# -- exit ----------------------------------------------------------------------------------------

_EXIT_NOW = """
import atexit, sys
from proxy.cli.main import _exit_now

class Torn:
    def __del__(self):
        print("torn down", flush=True)

kept = Torn()  # a module global: only the interpreter's teardown would delete it
atexit.register(print, "registered first, runs last", flush=True)
atexit.register(print, "registered last, runs first", flush=True)
print("buffered, not flushed")  # stdout is a pipe: block-buffered
sys.stderr.write("on stderr")
_exit_now(3)
"""


@pytest.mark.slow
def test_a_stopped_server_runs_the_exit_functions_and_skips_the_teardown() -> None:
    """``_exit_now`` (issue 22 item 8: a stopped server exits at once): the exit functions
    libraries registered still run, last registered first; what is buffered on stdout and
    stderr is written; the interpreter's teardown is skipped; the server's code is the exit
    status. It calls the private ``atexit._run_exitfuncs`` (no public call does this): this
    fails if a Python drops or changes it."""
    done = subprocess.run(
        [sys.executable, "-c", _EXIT_NOW],
        capture_output=True,
        text=True,
        timeout=60,
        env=os.environ | {"PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        check=False,
    )
    assert done.returncode == 3
    assert done.stdout.splitlines() == [
        "buffered, not flushed",
        "registered last, runs first",
        "registered first, runs last",
    ]
    assert done.stderr == "on stderr"
