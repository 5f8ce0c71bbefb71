"""The [dashboard] table of the config file: optional, with checked values."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from proxy.config.model import DashboardConfig, load_config, parse_config
from proxy.errors import ConfigError

BASE: dict[str, Any] = {
    "edge": {"listen": "127.0.0.1:0"},
    "api": {"listen": "127.0.0.1:0"},
    "cache": {"max_bytes": "1MiB"},
    "state": {"path": "state.db"},
    "domains": [{"name": "example.com", "origin": "http://127.0.0.1:9"}],
}


def test_the_table_is_optional_and_the_defaults_are_sane(tmp_path: Path) -> None:
    config = parse_config(BASE, base_dir=tmp_path)
    assert config.dashboard == DashboardConfig()
    assert config.dashboard.session_idle_timeout == 3600
    assert config.dashboard.session_lifetime == 8 * 3600
    assert config.dashboard.secure_cookie is False


def test_every_key_can_be_set(tmp_path: Path) -> None:
    table = {
        "session_idle_timeout": 600,
        "session_lifetime": 7200.5,
        "signin_failures_allowed": 3,
        "signin_max_delay": 120,
        "secure_cookie": True,
    }
    config = parse_config({**BASE, "dashboard": table}, base_dir=tmp_path)
    assert config.dashboard == DashboardConfig(600, 7200.5, 3, 120, True)


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"session_idle_timeout": 0}, "dashboard.session_idle_timeout: must be a number"),
        ({"session_lifetime": "8h"}, "dashboard.session_lifetime: must be a number"),
        ({"session_idle_timeout": 100, "session_lifetime": 50}, "must not be longer than"),
        ({"signin_failures_allowed": 0}, "dashboard.signin_failures_allowed: must be a whole"),
        ({"signin_failures_allowed": True}, "dashboard.signin_failures_allowed: must be a whole"),
        ({"signin_max_delay": 0.5}, "dashboard.signin_max_delay: must be at least 1 second"),
        ({"secure_cookie": "yes"}, "dashboard.secure_cookie: must be true or false"),
        ({"listen": "127.0.0.1:9"}, "dashboard.listen: unknown key"),
    ],
)
def test_bad_values_name_the_key(tmp_path: Path, table: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config({**BASE, "dashboard": table}, base_dir=tmp_path)
    assert message in str(raised.value)


def test_a_dashboard_that_is_not_a_table_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="dashboard: must be a table"):
        parse_config({**BASE, "dashboard": 1}, base_dir=tmp_path)


@pytest.mark.slow
def test_the_example_config_loads_with_the_documented_defaults() -> None:
    example = Path(__file__).parents[2] / "config" / "proxy.toml"
    assert load_config(example).dashboard == DashboardConfig()
    assert "[dashboard]" in example.read_text(encoding="utf-8")
