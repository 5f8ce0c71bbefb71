"""A reload's refusal names the keys the operator changed (README "Reloading the config")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from proxy.config.diff import diff
from proxy.config.model import parse_config


def base() -> dict[str, Any]:
    return {
        "edge": {"listen": "127.0.0.1:8080"},
        "api": {"listen": "127.0.0.1:8081"},
        "cache": {"max_bytes": "1MiB"},
        "state": {"path": "state.db"},
        "domains": [{"name": "example.com", "origin": "http://127.0.0.1:9000"}],
    }


@pytest.mark.parametrize(("before", "after"), [(1, 2), (2, 1)])
def test_changing_workers_names_only_workers(tmp_path: Path, before: int, after: int) -> None:
    """Adding `workers = 2` to the quick start's file and reloading printed "reload refused:
    [fleet], edge.workers changed": the file has no [fleet]; the node's embedded one comes
    with the workers."""
    old, new = base(), base()
    old["edge"]["workers"], new["edge"]["workers"] = before, after
    change = diff(parse_config(old, base_dir=tmp_path), parse_config(new, base_dir=tmp_path))
    assert change.restart == ("edge.workers",)
    assert change.refusal() == (
        "reload refused: edge.workers changed, which needs a restart (the running config stays)"
    )


def test_a_fleet_table_written_with_the_workers_is_still_named(tmp_path: Path) -> None:
    old, new = base(), base()
    new["edge"]["workers"] = 2
    new["fleet"] = {"url": "redis://10.0.0.5:6379/0"}
    change = diff(parse_config(old, base_dir=tmp_path), parse_config(new, base_dir=tmp_path))
    assert change.restart == ("[fleet]", "edge.workers")


@pytest.mark.slow
def test_a_fleet_table_added_to_one_process_is_named(tmp_path: Path) -> None:
    old, new = base(), base()
    new["fleet"] = {}
    change = diff(parse_config(old, base_dir=tmp_path), parse_config(new, base_dir=tmp_path))
    assert change.restart == ("[fleet]",)
