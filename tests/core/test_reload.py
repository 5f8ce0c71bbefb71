"""What a reload changes (proxy/config/diff.py): domains added, removed, re-pointed (their
entries cleared), retuned (kept), and keys that need a restart (the reload refused)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from proxy.config.diff import ConfigChange, diff
from proxy.config.model import Config, parse_config

ORIGIN = "http://127.0.0.1:9000"


def config(*domains: dict[str, Any], **tables: dict[str, Any]) -> Config:
    data: dict[str, Any] = {
        "edge": {"listen": "127.0.0.1:8080"},
        "api": {"listen": "127.0.0.1:8081"},
        "cache": {"max_bytes": "16MiB"},
        "state": {"path": "state.db"},
        "domains": list(domains) or [{"name": "example.com", "origin": ORIGIN}],
    }
    for table, keys in tables.items():
        data[table] = {**data.get(table, {}), **keys}
    return parse_config(data, base_dir=Path("/srv"))


def domain(name: str = "example.com", **keys: Any) -> dict[str, Any]:
    return {"name": name, "origin": ORIGIN, **keys}


def test_the_same_config_changes_nothing() -> None:
    assert diff(config(), config()) == ConfigChange(unchanged=("example.com",))


def test_domains_added_and_removed() -> None:
    change = diff(config(domain("a.test"), domain("b.test")), config(domain("b.test"), domain()))
    assert (change.added, change.removed, change.unchanged) == (
        ("example.com",),
        ("a.test",),
        ("b.test",),
    )
    assert change.cleared == ("a.test",)
    assert not change.refused


@pytest.mark.parametrize(
    ("keys", "repointed"),
    [
        ({"origin": "http://127.0.0.1:9001"}, True),  # another origin: other content
        ({"origin": "https://127.0.0.1:9000"}, True),
        ({"heuristic_freshness": True}, True),  # changes what is stored
        ({"read_timeout": 5}, False),
        ({"connect_timeout": 1}, False),
        ({"stale_if_error": 60}, False),
        ({"origin_connections": 8, "origin_queue_timeout": 1}, False),
    ],
)
def test_which_domain_keys_clear_the_domain(keys: dict[str, Any], repointed: bool) -> None:
    change = diff(config(domain()), config(domain(**keys)))
    assert change.repointed == (("example.com",) if repointed else ())
    assert change.retuned == (() if repointed else ("example.com",))
    assert change.cleared == change.repointed


@pytest.mark.parametrize(
    ("tables", "restart"),
    [
        ({"edge": {"listen": "127.0.0.1:9090"}}, ("edge.listen",)),
        ({"edge": {"workers": 2}}, ("edge.workers",)),  # the implied fleet is not named
        ({"edge": {"via": "other"}}, ("edge.via",)),  # in every stored entry's hit lines
        ({"cache": {"name": "other"}}, ("cache.name",)),
        ({"cache": {"max_bytes": "32MiB"}}, ("cache.max_bytes",)),
        ({"cache": {"disk_path": "/var/cache/cdn"}}, ("cache.disk_path",)),  # the tier's lock
        (
            {"cache": {"disk_path": "c", "disk_max_bytes": "2GiB"}},
            ("cache.disk_max_bytes", "cache.disk_path"),
        ),
        ({"api": {"listen": "127.0.0.1:9091"}}, ("api.listen",)),
        ({"state": {"path": "other.db"}}, ("state.path",)),
        ({"dashboard": {"secure_cookie": True}}, ("dashboard.secure_cookie",)),
        ({"edge": {"body_timeout": 5, "request_buffer_bytes": 1024}}, ()),
        ({"cache": {"max_object_bytes": "1MiB"}}, ()),
        ({"api": {"max_body_bytes": 1024, "body_timeout": 2}}, ()),
    ],
)
def test_which_table_keys_need_a_restart(
    tables: dict[str, dict[str, Any]], restart: tuple[str, ...]
) -> None:
    change = diff(config(), config(**tables))
    assert change.restart == restart
    assert change.refused is bool(restart)


def test_a_role_added_needs_a_restart() -> None:
    without_api = parse_config(
        {
            "edge": {"listen": "127.0.0.1:8080"},
            "cache": {"max_bytes": "16MiB"},
            "fleet": {"url": "redis://127.0.0.1:6379/0"},
            "domains": [domain()],
        },
        base_dir=Path("/srv"),
    )
    assert "[api]" in diff(without_api, config()).restart


@pytest.mark.slow
def test_the_refusal_and_the_summary_are_one_line_each() -> None:
    refused = diff(config(), config(edge={"listen": "127.0.0.1:1"}, cache={"name": "x"}))
    assert refused.refusal() == (
        "reload refused: cache.name, edge.listen changed, which needs a restart"
        " (the running config stays)"
    )
    change = diff(
        config(domain("a.test"), domain("b.test"), domain("c.test")),
        config(domain("b.test", origin="http://127.0.0.1:1"), domain("c.test"), domain("d.test")),
    )
    assert change.summary() == (
        "added d.test; removed a.test; re-pointed (cleared) b.test; 1 domain unchanged"
    )
