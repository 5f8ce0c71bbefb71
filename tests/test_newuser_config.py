"""Config values a new operator can write that the loader used to take, and that failed later:
a 500 with a traceback on every request, every HTTP/2 connection refused with one, a port
read from non-ASCII digits. Each is now one line naming the key, at load (issue 22's bar:
"bad config values: clear one-line errors naming the key")."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trustme

from proxy.config.model import parse_config
from proxy.config.values import Listen
from proxy.errors import ConfigError


def base() -> dict[str, Any]:
    return {
        "edge": {"listen": "127.0.0.1:8080"},
        "api": {"listen": "127.0.0.1:8081"},
        "cache": {"max_bytes": "1MiB"},
        "state": {"path": "state.db"},
        "domains": [{"name": "example.com", "origin": "http://127.0.0.1:9000"}],
    }


def _set(data: dict[str, Any], path: str, value: object) -> None:
    """``table.key``, ``domains.key`` (the first domain) or ``health.key`` (its check)."""
    table, _, key = path.partition(".")
    if table == "domains":
        target = data["domains"][0]
    elif table == "health":
        target = data["domains"][0].setdefault("health_check", {})
    else:
        target = data.setdefault(table, {})
    target[key] = value


def _refused(data: dict[str, Any], tmp_path: Path) -> str:
    with pytest.raises(ConfigError) as raised:
        parse_config(data, base_dir=tmp_path)
    text = str(raised.value)
    assert "\n" not in text
    return text


NAN, INF = float("nan"), float("inf")
# TOML has nan and inf; every key of seconds took them (nan > 0 is false, and so is nan <= 0).
# A nan read_timeout made every miss a 500 with uvloop's "cannot convert float NaN to integer".
SECONDS = [
    "edge.shutdown_timeout",
    "edge.body_timeout",
    "edge.header_timeout",
    "edge.keepalive_timeout",
    "edge.send_timeout",
    "edge.tunnel_idle_timeout",
    "api.body_timeout",
    "api.auth_failure_window",
    "dashboard.session_idle_timeout",
    "dashboard.signin_max_delay",
    "domains.connect_timeout",
    "domains.read_timeout",
    "domains.origin_queue_timeout",
    "domains.stale_if_error",
    "health.interval",
    "health.timeout",
]


@pytest.mark.parametrize("value", [NAN, INF, -INF], ids=["nan", "inf", "-inf"])
@pytest.mark.parametrize("path", SECONDS)
def test_seconds_must_be_finite(tmp_path: Path, path: str, value: float) -> None:
    data = base()
    _set(data, path, value)
    key = path.replace("domains.", "domains[0].").replace("health.", "domains[0].health_check.")
    text = _refused(data, tmp_path)
    assert text.startswith(f"{key}: ")
    assert "number of seconds" in text


def test_a_finite_number_of_seconds_is_still_taken(tmp_path: Path) -> None:
    data = base()
    _set(data, "domains.read_timeout", 1e6)
    _set(data, "domains.stale_if_error", 0)
    domain = parse_config(data, base_dir=tmp_path).domains[0]
    assert (domain.read_timeout, domain.stale_if_error) == (1e6, 0.0)


@pytest.mark.slow
def test_the_cli_refuses_a_nan_timeout_before_serving(tmp_path: Path) -> None:
    """What the operator sees: `cdn-proxy serve` exits 2 with one line, and nothing starts
    (the same file used to start, then answer every miss 500 with a traceback in the log;
    before the fix this process serves until the timeout kills it)."""
    path = tmp_path / "proxy.toml"
    path.write_text(
        '[edge]\nlisten = "127.0.0.1:0"\n[api]\nlisten = "127.0.0.1:0"\n'
        '[cache]\nmax_bytes = "1MiB"\n[state]\npath = "state.db"\n'
        '[[domains]]\nname = "example.com"\norigin = "http://127.0.0.1:9"\nread_timeout = nan\n',
        encoding="utf-8",
    )
    done = subprocess.run(
        [sys.executable, "-m", "proxy", "serve", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr == (
        "cdn-proxy: config error: domains[0].read_timeout: must be a finite number of seconds,"
        " not nan\n"
    )
    assert not (tmp_path / "state.db").exists()


@pytest.mark.parametrize(
    ("path", "value"),
    [
        # hyperframe packs SETTINGS values as 32 bits: past that every HTTP/2 connection
        # (h2c or TLS) failed in initiate_connection with struct.error, logged as a traceback.
        ("edge.http2_max_concurrent_streams", 5_000_000_000),
        ("edge.http2_max_header_list_bytes", "8GiB"),
        ("edge.http2_max_header_list_bytes", 2**32),
    ],
)
def test_http2_settings_fit_in_32_bits(tmp_path: Path, path: str, value: object) -> None:
    data = base()
    _set(data, path, value)
    text = _refused(data, tmp_path)
    assert text.startswith(f"{path}: must be at most 4294967295")


def test_the_largest_http2_settings_are_taken(tmp_path: Path) -> None:
    data = base()
    _set(data, "edge.http2_max_concurrent_streams", 2**32 - 1)
    _set(data, "edge.http2_max_header_list_bytes", 2**32 - 1)
    edge = parse_config(data, base_dir=tmp_path).edge
    assert edge is not None
    assert edge.http2_max_concurrent_streams == edge.http2_max_header_list_bytes == 2**32 - 1


@pytest.mark.parametrize(
    "listen", ["127.0.0.1:\u0668\u0660", "127.0.0.1:\uff18\uff10", "127.0.0.1:\u00b2"]
)
def test_a_port_is_ascii_digits(tmp_path: Path, listen: str) -> None:
    """str.isdigit() is true of Arabic-Indic, full-width and superscript digits, and int()
    reads most of them: "127.0.0.1:٨٠" listened on port 80."""
    data = base()
    _set(data, "edge.listen", listen)
    assert _refused(data, tmp_path).startswith(f"edge.listen: {listen!r} must be HOST:PORT")


def test_an_ipv6_listen_address_is_still_taken(tmp_path: Path) -> None:
    data = base()
    _set(data, "edge.listen", "[::1]:8080")
    edge = parse_config(data, base_dir=tmp_path).edge
    assert edge is not None and edge.listen == Listen("::1", 8080)


@pytest.mark.parametrize("url", ["redis://h:99999", "redis://h:port/0", "rediss://h:-1"])
def test_a_fleet_url_port_is_checked(tmp_path: Path, url: str) -> None:
    """A bad port reached the Valkey client, which failed at start with its own words."""
    data = base()
    data["fleet"] = {"url": url}
    assert _refused(data, tmp_path) == f"fleet.url: {url!r} has a bad port"


@pytest.mark.parametrize(
    ("origin", "problem"),
    [
        ("http://exa mple:9000", "has white space or a control character"),
        ("http://exa\u00a0mple", "has white space or a control character"),
        ("http://a<b>:9000", "has a bad host name"),
        ("http://a%20b", "has a bad host name"),
    ],
)
def test_an_origin_host_has_no_spaces_or_controls(
    tmp_path: Path, origin: str, problem: str
) -> None:
    """Such a host was taken, and every request to it failed (502) with a resolver error."""
    data = base()
    _set(data, "domains.origin", origin)
    assert _refused(data, tmp_path) == f"domains[0].origin: {origin!r} {problem}"


def test_a_tab_in_an_origin_is_not_dropped(tmp_path: Path) -> None:
    """urlsplit removes tabs and line feeds (as WHATWG URLs do): "http://exa\tmple" was
    taken as the origin http://example, another host than the one written."""
    data = base()
    _set(data, "domains.origin", "http://exa\tmple")
    assert _refused(data, tmp_path) == (
        "domains[0].origin: 'http://exa\\tmple' has white space or a control character"
    )


@pytest.mark.parametrize(
    "origin", ["http://app_1:8000", "https://[::1]:9000", "http://10.0.0.1", "http://bücher.de"]
)
def test_usual_origin_hosts_are_still_taken(tmp_path: Path, origin: str) -> None:
    data = base()
    _set(data, "domains.origin", origin)
    assert parse_config(data, base_dir=tmp_path).domains[0].origin == origin


@pytest.mark.parametrize(
    ("text", "size"), [("2TiB", 2 * 1024**4), ("1TB", 1000**4), ("512GiB", 512 * 1024**3)]
)
def test_a_disk_tier_may_be_given_in_terabytes(tmp_path: Path, text: str, size: int) -> None:
    """disk_max_bytes is a disk's size: "2TiB" was "not a size" (only up to GiB was)."""
    data = base()
    data["cache"] |= {"disk_path": "cache", "disk_max_bytes": text}
    cache = parse_config(data, base_dir=tmp_path).cache
    assert cache is not None and cache.disk_max_bytes == size


def test_the_api_may_not_listen_on_the_tls_port(tmp_path: Path) -> None:
    """With tls_listen on the API's address, start-up said "api.listen: cannot listen on
    127.0.0.1:8443 (... address already in use)": in use by the node itself."""
    data = base()
    data["api"]["listen"] = data["edge"]["tls_listen"] = "127.0.0.1:8443"
    leaf = trustme.CA().issue_cert("example.com")
    leaf.cert_chain_pems[0].write_to_path(str(tmp_path / "edge.pem"))
    leaf.private_key_pem.write_to_path(str(tmp_path / "edge.key"))
    data["edge"] |= {"tls_cert": "edge.pem", "tls_key": "edge.key"}
    assert _refused(data, tmp_path) == "api.listen: must differ from edge.tls_listen"
    data["api"]["listen"] = "127.0.0.1:8081"
    assert parse_config(data, base_dir=tmp_path).api is not None


def test_a_unix_fleet_url_with_two_slashes_is_refused(tmp_path: Path) -> None:
    """unix://srv/valkey/v.sock loaded, and the Valkey client (which reads only the URL's
    path) connected to /valkey/v.sock: another socket than the one written."""
    data = base()
    data["fleet"] = {"url": "unix://srv/valkey/v.sock"}
    assert _refused(data, tmp_path) == (
        "fleet.url: 'unix://srv/valkey/v.sock' would be the socket '/valkey/v.sock': the path"
        " starts after three slashes (unix:///srv/valkey/v.sock)"
    )
    data["fleet"] = {"url": "unix:///srv/valkey/v.sock"}
    fleet = parse_config(data, base_dir=tmp_path).fleet
    assert fleet is not None and fleet.url == "unix:///srv/valkey/v.sock"


@pytest.mark.parametrize("url", ["redis://h:6379/abc", "redis://h:6379/1/2", "rediss://h/0/"])
def test_a_fleet_url_path_is_a_database_number(tmp_path: Path, url: str) -> None:
    """The Valkey client reads redis://h:6379/abc as database 0 and redis://h:6379/1/2 as
    database 12, with no word: a fleet whose nodes disagree on the database never sees a
    clear of another's."""
    data = base()
    data["fleet"] = {"url": url}
    assert _refused(data, tmp_path) == (
        f"fleet.url: {url!r}: the path must be a database number, as in /0"
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "url", ["redis://h:6379/0", "redis://h:6379", "redis://h/", "rediss://h/15"]
)
def test_usual_fleet_urls_are_still_taken(tmp_path: Path, url: str) -> None:
    data = base()
    data["fleet"] = {"url": url}
    fleet = parse_config(data, base_dir=tmp_path).fleet
    assert fleet is not None and fleet.url == url
