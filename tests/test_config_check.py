"""``cdn-proxy config check FILE`` (issue 34 §4, decision 0043): every error of a config file
at once, one line each, exit 2; or, for a good file, the config the node runs with, every key
and default written, as TOML that reads back to the same config, exit 0."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from proxy.cli.main import main
from proxy.config.model import load_config, parse_config

BAD = """
[edge]
listen = "127.0.0.1:99999"
workers = 0
[api]
listen = "127.0.0.1:0"
max_body_bytes = "lots"
[cache]
max_bytes = "8MiB"
[state]
path = "state.db"
[[domains]]
name = "example.com"
origin = "ftp://x"
colour = "blue"
[domains.health_check]
method = "POST"
[[domains.rules]]
bypass_cookies = "session"
edge_ttl = "1y"
[[domains]]
name = "b.test"
origins = ["http://127.0.0.1:1", "gopher://x"]
[[domains]]
name = "EXAMPLE.com"
origin = "http://127.0.0.1:2"
"""

GOOD = """
[edge]
listen = "127.0.0.1:8080"
workers = 2
[api]
listen = "127.0.0.1:8081"
[cache]
max_bytes = "64MiB"
disk_path = "cache"
[state]
path = "state.db"
[[domains]]
name = "example.com"
origins = ["http://127.0.0.1:9001", "http://127.0.0.1:9002"]
backup_origins = ["http://127.0.0.1:9003"]
[domains.health_check]
path = "/healthz"
interval = "2s"
timeout = "2s"
method = "HEAD"
[[domains.rules]]
name = "wp"
bypass_cookies = ["wordpress_logged_in_*"]
query_ignore = ["utm_*"]
edge_ttl = "5m"
edge_ttl_by_status = { 404 = "1m" }
ignore_origin = ["Set-Cookie"]
[[domains.rules]]
name = "static"
paths = ["/static/*"]
bypass_cookies = []
[[domains]]
name = "other.test"
origin = "http://127.0.0.1:9004"
"""


def check(capsys: pytest.CaptureFixture[str], path: Path) -> tuple[int, str, list[str]]:
    code = main(["config", "check", str(path)])
    out, err = capsys.readouterr()
    return code, out, err.splitlines()


def test_every_error_is_reported_at_once(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Start-up names the first error only; the check names all ten, one line each, and
    nothing that setting one aside made up (a removed key is not then "required")."""
    config = tmp_path / "proxy.toml"
    config.write_text(BAD, encoding="utf-8")
    code, out, lines = check(capsys, config)
    assert (code, out) == (2, "")
    keys = [line.removeprefix("cdn-proxy: config error: ").partition(": ")[0] for line in lines]
    assert keys[:-1] == [
        "edge.listen",
        "edge.workers",
        "api.max_body_bytes",
        "domains[0].colour",
        "domains[0].origin",
        "domains[0].health_check.method",
        "domains[0].rules[0].bypass_cookies",
        "domains[0].rules[0].edge_ttl",
        "domains[1].origins[1]",
        "domains[2].name",
    ], lines
    assert "'example.com' is configured twice" in lines[-2]
    assert lines[-1] == f"cdn-proxy: {config}: 10 errors"
    # Start-up would have named the first only.
    with pytest.raises(Exception, match=r"^edge.listen: "):
        load_config(config)


def test_a_good_file_prints_what_it_runs_with(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Every key is written, defaults included, in the code's units (seconds, bytes), the
    clamped health-check timeout as it applies; and what is printed reads back to the same
    config."""
    config = tmp_path / "proxy.toml"
    config.write_text(GOOD, encoding="utf-8")
    code, out, lines = check(capsys, config)
    assert code == 0, lines
    assert lines == [f"cdn-proxy: {config}: the config is valid (what it runs with is above)"]
    printed = tomllib.loads(out)
    assert printed["edge"]["shutdown_timeout"] == 30.0  # a default, written
    assert printed["cache"]["max_bytes"] == 64 * 1024**2
    assert printed["cache"]["disk_path"] == str(tmp_path / "cache")
    assert printed["fleet"]["lease"] == 2.0  # the embedded fleet of workers = 2
    health = printed["domains"][0]["health_check"]
    assert (health["interval"], health["timeout"], health["method"]) == (2.0, 2.0, "HEAD")
    assert printed["domains"][0]["rules"][1]["bypass_cookies"] == []
    assert "# tls_cert is not set" in out
    assert parse_config(printed, base_dir=tmp_path / "elsewhere") == load_config(config)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[edge\n", "is not valid TOML"),
        (None, "no such file"),
    ],
)
def test_a_file_that_cannot_be_read_is_one_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str | None, message: str
) -> None:
    config = tmp_path / "proxy.toml"
    if text is not None:
        config.write_text(text, encoding="utf-8")
    code, out, lines = check(capsys, config)
    assert (code, out) == (2, "")
    assert len(lines) == 2 and message in lines[0], lines
    assert lines[1] == f"cdn-proxy: {config}: 1 error"


def test_an_error_nothing_can_answer_ends_the_check_and_says_so(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """With neither [edge] nor [api] there is no node to check further: the check says it
    stopped, so the operator knows more may follow."""
    config = tmp_path / "proxy.toml"
    config.write_text('[[domains]]\nname = "example.com"\norigin = "ftp://x"\n', encoding="utf-8")
    code, out, lines = check(capsys, config)
    assert (code, out) == (2, "")
    assert lines[0].startswith("cdn-proxy: config error: edge: a node needs an [edge] table")
    assert lines[1] == (
        f"cdn-proxy: {config}: 1 error"
        " (the check stopped at the last one: fix it and check again for more)"
    )


SHIPPED = Path(__file__).parent.parent / "config"


def test_the_shipped_config_reads_back_as_printed(capsys: pytest.CaptureFixture[str]) -> None:
    path = SHIPPED / "proxy.toml"
    code, out, lines = check(capsys, path)
    assert code == 0, lines
    assert parse_config(tomllib.loads(out), base_dir=path.parent) == load_config(path)


@pytest.mark.slow
def test_the_production_example_names_each_missing_tls_file(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Its certificates are not on this machine: each is named once, the edge's and every
    domain's (a certificate set aside takes its key and listener with it)."""
    path = SHIPPED / "production.toml"
    code, _, lines = check(capsys, path)
    assert code == 2
    files = [line.split(": ")[3].split(" cannot be read")[0] for line in lines[:-1]]
    assert all(file.startswith("/etc/cdn-proxy/tls/") for file in files), lines
    assert len(files) == len(set(files)) == 4, lines
    assert lines[-1] == f"cdn-proxy: {path}: 4 errors"


def test_the_file_may_be_named_with_config_as_every_other_command_takes_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A new operator typed ``config check --config PATH``, as for serve, reload, token and
    purge, and argparse refused it (exit 2, 'unrecognized arguments')."""
    config = tmp_path / "proxy.toml"
    config.write_text(GOOD, encoding="utf-8")
    assert main(["config", "check", "--config", str(config)]) == 0
    out, _ = capsys.readouterr()
    assert tomllib.loads(out)["cache"]["max_bytes"] == 64 * 1024**2
    for twice_or_none in (["--config", str(config), str(config)], []):
        assert main(["config", "check", *twice_or_none]) == 2
        _, err = capsys.readouterr()
        assert "name one config file: FILE, or --config FILE" in err


def test_a_reader_that_leaves_early_gets_no_traceback(tmp_path: Path) -> None:
    """``cdn-proxy config check FILE | true`` (or ``trace ... | head``): the reader has left
    before the command writes; it ends quietly, with no BrokenPipeError traceback."""
    config = tmp_path / "proxy.toml"
    config.write_text(GOOD, encoding="utf-8")
    command = [sys.executable, "-m", "proxy", "config", "check", str(config)]
    shell = " ".join(f"'{part}'" for part in command) + " | true"
    done = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, timeout=60)
    assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr, done.stderr
